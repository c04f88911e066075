//! Subquery shapes (`col IN (SELECT …)`) over real HTTP against a private cluster: Electric's
//! move messages byte for byte where they matter, clients that apply them as Electric's do
//! compared with `SELECT` after every step, rejections, and SIGKILL at random points of moves.

mod common;

use std::time::Duration;

use common::process::{free_port, Syncline};
use common::tagged::TaggedClient;
use common::{fixture, Fixture};
use rand::{Rng, SeedableRng};
use serde_json::Value;

const SCHEMA: &str = "
    CREATE TABLE parent (id int PRIMARY KEY, active bool NOT NULL, value int);
    CREATE TABLE child (id int PRIMARY KEY, parent_id int, urgent bool NOT NULL DEFAULT false,
                        title text);
    INSERT INTO parent VALUES (1, true, 7), (2, false, 7), (3, true, 8);
    INSERT INTO child VALUES (10, 1, false, 'a'), (20, 2, false, 'b'), (30, 3, true, 'c'),
                             (40, NULL, true, 'd');
";

const IN_ACTIVE: &str =
    "table=child&where=parent_id%20IN%20(SELECT%20id%20FROM%20parent%20WHERE%20active)";

/// A client following one shape over HTTP.
struct Client {
    base: String,
    query: String,
    handle: String,
    offset: String,
    state: TaggedClient,
}

impl Client {
    async fn start(http: &reqwest::Client, base: &str, query: &str) -> Client {
        let mut c = Client {
            base: base.to_owned(),
            query: query.to_owned(),
            handle: String::new(),
            offset: "-1".to_owned(),
            state: TaggedClient::default(),
        };
        c.catch_up(http).await.expect("the first request succeeds");
        c
    }

    /// One request (live or not); returns the messages.
    async fn request(&mut self, http: &reqwest::Client, live: bool) -> Result<Vec<Value>, u16> {
        let mut url = format!(
            "{}/v1/shape?{}&offset={}",
            self.base, self.query, self.offset
        );
        if !self.handle.is_empty() {
            url.push_str(&format!("&handle={}", self.handle));
        }
        if live {
            url.push_str("&live=true");
        }
        let r = http.get(url).send().await.map_err(|_| 0u16)?;
        if r.status() != 200 {
            return Err(r.status().as_u16());
        }
        self.handle = r.headers()["electric-handle"].to_str().unwrap().to_owned();
        self.offset = r.headers()["electric-offset"].to_str().unwrap().to_owned();
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        let messages = body.as_array().cloned().unwrap_or_default();
        for m in &messages {
            self.state.apply(m);
        }
        Ok(messages)
    }

    /// Reads until up-to-date.
    async fn catch_up(&mut self, http: &reqwest::Client) -> Result<(), u16> {
        loop {
            let messages = self.request(http, false).await?;
            if messages
                .iter()
                .any(|m| m["headers"]["control"] == "up-to-date")
            {
                return Ok(());
            }
        }
    }

    /// Follows live until the rows' ids are `expected` (for up to a minute: a loaded machine
    /// answers with less at a time, not wrongly).
    async fn converge(&mut self, http: &reqwest::Client, expected: &[i64]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline && self.state.problems.is_empty() {
            if self.state.ids() == expected {
                return;
            }
            self.request(http, true).await.expect("live request");
        }
        if self.state.ids() == expected && self.state.problems.is_empty() {
            return;
        }
        let summary: Vec<String> = self
            .state
            .seen
            .iter()
            .filter(|m| m["headers"]["control"] != "up-to-date")
            .map(|m| {
                let h = &m["headers"];
                match (h["event"].as_str(), h["control"].as_str()) {
                    (Some(event), _) => format!("{event} {}", h["patterns"]),
                    (_, Some(control)) => control.to_owned(),
                    _ => format!("{} {} {}", h["operation"], m["value"]["id"], h["tags"]),
                }
            })
            .collect();
        panic!(
            "{} (handle {}, offset {}): client has {:?}, Postgres {:?}; problems {:#?}; messages but up-to-date: {summary:#?}",
            self.query,
            self.handle,
            self.offset,
            self.state.ids(),
            expected,
            self.state.problems,
        );
    }
}

async fn child_ids(db: &tokio_postgres::Client, filter: &str) -> Vec<i64> {
    db.query(
        &format!("SELECT id::int8 FROM child WHERE {filter} ORDER BY id"),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn base(fx: &Fixture) -> String {
    format!("http://{}", fx.server.addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_move_in_and_out_with_electrics_messages() {
    let fx = fixture(SCHEMA).await;
    let mut client = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    assert_eq!(client.state.ids(), vec![10, 30]);
    let row = &client.state.rows.values().next().unwrap();
    assert_eq!(row.tags.len(), 1, "one disjunct");
    assert_eq!(row.active, vec![true]);

    let xid: i64 = fx
        .db
        .query_one(
            "WITH u AS (UPDATE parent SET active = true WHERE id = 2 RETURNING 1)
             SELECT txid_current() FROM u",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let messages = client.request(&fx.http, true).await.unwrap();
    let event = &messages[0]["headers"];
    assert_eq!(event["event"], "move-in", "{messages:#?}");
    assert_eq!(event["txids"], serde_json::json!([xid]));
    let inserted = &messages[1];
    assert_eq!(inserted["value"]["id"], "20");
    assert_eq!(inserted["headers"]["is_move_in"], true);
    assert_eq!(inserted["headers"]["operation"], "insert");
    assert_eq!(
        event["patterns"][0]["value"], inserted["headers"]["tags"][0],
        "the pattern is the moved rows' tag"
    );
    assert_eq!(messages[2]["headers"]["control"], "snapshot-end");
    assert_eq!(messages[3]["headers"]["control"], "up-to-date");
    assert_eq!(messages.len(), 4);
    assert_eq!(client.state.ids(), vec![10, 20, 30]);

    let tag_of_10 = client
        .state
        .rows
        .values()
        .find(|r| r.value["id"] == "10")
        .unwrap()
        .tags[0][0]
        .clone();
    fx.db
        .batch_execute("UPDATE parent SET active = false WHERE id = 1")
        .await
        .unwrap();
    let messages = client.request(&fx.http, true).await.unwrap();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(messages[0]["headers"]["event"], "move-out");
    assert_eq!(
        messages[0]["headers"]["patterns"],
        serde_json::json!([{"pos": 0, "value": tag_of_10}])
    );
    assert_eq!(client.state.ids(), vec![20, 30]);

    // A resumed client from the start gets the same rows.
    let fresh = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    assert_eq!(fresh.state.ids(), vec![20, 30]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_match_postgres_through_moves_and_changes_together() {
    let fx = fixture(SCHEMA).await;
    let filter = "parent_id IN (SELECT id FROM parent WHERE active)";
    let mut client = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    let steps = [
        // A parent starts to match and a new child of it arrives in one transaction.
        "BEGIN; UPDATE parent SET active = true WHERE id = 2; INSERT INTO child VALUES (21, 2, false, 'e'); COMMIT",
        // It stops matching while its child changes.
        "BEGIN; UPDATE child SET title = 'f' WHERE id = 21; UPDATE parent SET active = false WHERE id = 2; COMMIT",
        // A parent and its children inserted together.
        "BEGIN; INSERT INTO parent VALUES (4, true, 1); INSERT INTO child VALUES (41, 4, false, 'g'), (42, 4, false, 'h'); COMMIT",
        // A child switches parent.
        "UPDATE child SET parent_id = 2 WHERE id = 41",
        "UPDATE child SET parent_id = 3 WHERE id = 20",
        // Deleting a parent is a move-out.
        "DELETE FROM parent WHERE id = 3",
        // Back and forth in one transaction.
        "BEGIN; UPDATE parent SET active = true WHERE id = 2; UPDATE parent SET active = false WHERE id = 2; UPDATE parent SET active = true WHERE id = 2; COMMIT",
        "INSERT INTO child VALUES (50, 2, false, 'i'), (51, 1, false, 'j')",
        "UPDATE parent SET id = 5 WHERE id = 4",
    ];
    for step in steps {
        fx.db.batch_execute(step).await.unwrap();
        let expected = child_ids(&fx.db, filter).await;
        client.converge(&fx.http, &expected).await;
    }
}

/// A subquery shape made before the server set the table's `REPLICA IDENTITY FULL` carries the
/// table as it was then; the next shape on the table, made after, rebuilds the table's router.
/// The first shape's value sets must come through the rebuild, or its `IN` never matches again
/// and every later change to its rows is lost (a conformance run's random differential found
/// this: an update never reached the shape).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shape_made_on_the_table_as_it_was_keeps_its_value_sets_when_the_next_rebuilds_it() {
    let fx = fixture(SCHEMA).await;
    let filter = "parent_id IN (SELECT id FROM parent WHERE active)";
    let mut first = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    fx.db
        .batch_execute("INSERT INTO child VALUES (11, 1, false, 'x')")
        .await
        .unwrap();
    first
        .converge(&fx.http, &child_ids(&fx.db, filter).await)
        .await;
    let identity: String = fx
        .db
        .query_one(
            "SELECT relreplident::text FROM pg_class WHERE relname = 'child'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(identity, "f", "the first shape set REPLICA IDENTITY FULL");

    let mut second = Client::start(&fx.http, &base(&fx), "table=child&where=urgent").await;
    fx.db
        .batch_execute(
            "INSERT INTO child VALUES (12, 3, true, 'y'); UPDATE child SET title = 'z' WHERE id = 10",
        )
        .await
        .unwrap();
    first
        .converge(&fx.http, &child_ids(&fx.db, filter).await)
        .await;
    second
        .converge(&fx.http, &child_ids(&fx.db, "urgent").await)
        .await;
}

/// Transactions that commit while a move-in query starts, and that its snapshot sees, are in its
/// rows; a move queued between them must not make them apply again after the splice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_queued_during_a_move_in_does_not_replay_what_its_rows_hold() {
    let fx = fixture(SCHEMA).await;
    let filter = "parent_id IN (SELECT id FROM parent WHERE active)";
    let mut client = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    fx.db
        .batch_execute("UPDATE parent SET active = false WHERE id = 3")
        .await
        .unwrap();
    client
        .converge(&fx.http, &child_ids(&fx.db, filter).await)
        .await;
    for _ in 0..5 {
        // Parent 2 joins (a move-in), parent 3 joins right after (queued behind it), and child
        // 30 moves from 3 to 2; the first move-in's snapshot almost always sees all three.
        fx.db
            .batch_execute(
                "BEGIN; UPDATE parent SET active = true WHERE id = 2; COMMIT;
                 BEGIN; UPDATE parent SET active = true WHERE id = 3; COMMIT;
                 BEGIN; UPDATE child SET parent_id = 2 WHERE id = 30; COMMIT",
            )
            .await
            .unwrap();
        client
            .converge(&fx.http, &child_ids(&fx.db, filter).await)
            .await;
        fx.db
            .batch_execute(
                "UPDATE parent SET active = false WHERE id IN (2, 3);
                 UPDATE child SET parent_id = 3 WHERE id = 30",
            )
            .await
            .unwrap();
        client
            .converge(&fx.http, &child_ids(&fx.db, filter).await)
            .await;
    }
}

/// Postgres hands a commit to logical decoding once its WAL is flushed, and shows it to other
/// sessions only after: a snapshot taken in between misses a transaction the pipeline already
/// processed, and its rows reach neither the snapshot nor the log. A synchronous standby that
/// never connects holds a commit in that window until its wait is cancelled; a move-in, a new
/// shape's snapshot and a subset query taken meanwhile must wait for it (a conformance run's
/// random differential lost a move-in's row this way under load, where the window is short).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_see_every_transaction_the_stream_delivered_before_them() {
    let fx = fixture(SCHEMA).await;
    let filter = "parent_id IN (SELECT id FROM parent WHERE active)";
    let mut moving = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    for sql in [
        "ALTER SYSTEM SET synchronous_standby_names = 'never_connects'",
        "SELECT pg_reload_conf()",
    ] {
        fx.db.batch_execute(sql).await.unwrap();
    }
    let committer = fx._cluster.connect("postgres").await;
    let held = tokio::spawn(async move {
        committer
            .batch_execute(
                "BEGIN; SET LOCAL synchronous_commit = on;
                 UPDATE parent SET active = true WHERE id = 2; INSERT INTO child VALUES (21, 2, false, 'e'); COMMIT",
            )
            .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let wal: String = loop {
        let waiting = fx
            .db
            .query_opt(
                "SELECT pg_current_wal_lsn()::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = waiting {
            break row.get(0);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the commit waits for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    loop {
        let acknowledged: bool = fx
            .db
            .query_one(
                &format!(
                    "SELECT bool_and(confirmed_flush_lsn >= '{wal}') FROM pg_replication_slots"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if acknowledged {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Syncline processes the commit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (http, url) = (fx.http.clone(), base(&fx));
    let fresh = tokio::spawn(async move { Client::start(&http, &url, "table=child").await });
    let subset = fx.http.get(format!(
        "{}/v1/shape?{IN_ACTIVE}&handle={}&offset={}&subset__where=id%20%3E%200",
        base(&fx),
        moving.handle,
        moving.offset
    ));
    let subset = tokio::spawn(async move { subset.send().await?.text().await });
    // Long enough for a snapshot that does not wait to be taken; nothing below depends on it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for sql in [
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        fx.db.batch_execute(sql).await.unwrap();
    }
    held.await
        .unwrap()
        .expect("cancelling the wait leaves the commit done");
    moving
        .converge(&fx.http, &child_ids(&fx.db, filter).await)
        .await;
    let fresh = fresh.await.unwrap();
    assert_eq!(fresh.state.ids(), child_ids(&fx.db, "true").await);
    let subset: Value =
        serde_json::from_str(&subset.await.unwrap().expect("the subset's answer")).unwrap();
    let mut ids: Vec<i64> = subset["data"]
        .as_array()
        .unwrap_or_else(|| panic!("subset rows: {subset}"))
        .iter()
        .map(|m| m["value"]["id"].as_str().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, child_ids(&fx.db, filter).await, "the subset's rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_in_or_and_params_follow_postgres() {
    let fx = fixture(SCHEMA).await;
    let shapes = [
        ("parent_id NOT IN (SELECT id FROM parent WHERE active)", None),
        ("parent_id IN (SELECT id FROM parent WHERE active) OR urgent", None),
        ("parent_id IN (SELECT id FROM parent WHERE value = $1) AND title <> 'x'", Some("7")),
        (
            "parent_id IN (SELECT id FROM parent WHERE active) OR parent_id IN (SELECT id FROM parent WHERE value = 8)",
            None,
        ),
    ];
    let mut clients = Vec::new();
    for (where_text, param) in shapes {
        let mut query = format!("table=child&where={}", urlencode(where_text));
        if let Some(p) = param {
            query.push_str(&format!("&params%5B1%5D={p}"));
        }
        let client = Client::start(&fx.http, &base(&fx), &query).await;
        let filter = match param {
            Some(p) => where_text.replace("$1", p),
            None => where_text.to_owned(),
        };
        clients.push((client, filter));
    }
    let steps = [
        "UPDATE parent SET active = true WHERE id = 2",
        "UPDATE parent SET active = false WHERE id = 1",
        "UPDATE parent SET value = 8 WHERE id = 1",
        "UPDATE child SET urgent = true WHERE id = 10",
        "UPDATE parent SET value = 7, active = true WHERE id = 3",
        "INSERT INTO parent VALUES (9, false, 7)",
        "INSERT INTO child VALUES (90, 9, false, 'z')",
        "UPDATE parent SET active = true WHERE id = 9",
        "DELETE FROM parent WHERE id = 2",
    ];
    for step in steps {
        fx.db.batch_execute(step).await.unwrap();
        for (client, filter) in &mut clients {
            let expected = child_ids(&fx.db, filter).await;
            client.converge(&fx.http, &expected).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_subqueries_move_rows_when_the_innermost_table_changes() {
    let fx = fixture(&format!(
        "{SCHEMA}
        CREATE TABLE org (id int PRIMARY KEY, premium bool NOT NULL);
        INSERT INTO org VALUES (1, true), (2, false);
        ALTER TABLE parent ADD COLUMN org_id int;
        UPDATE parent SET org_id = id % 2 + 1;"
    ))
    .await;
    let filter =
        "parent_id IN (SELECT id FROM parent WHERE org_id IN (SELECT id FROM org WHERE premium))";
    let query = format!("table=child&where={}", urlencode(filter));
    let mut client = Client::start(&fx.http, &base(&fx), &query).await;
    let steps = [
        "UPDATE org SET premium = true WHERE id = 2",
        "UPDATE org SET premium = false WHERE id = 1",
        "UPDATE parent SET org_id = 1 WHERE id = 3",
        "BEGIN; UPDATE org SET premium = true WHERE id = 1; INSERT INTO child VALUES (31, 3, false, 'n'); COMMIT",
        "BEGIN; INSERT INTO org VALUES (3, true); INSERT INTO parent VALUES (6, false, 1, 3); INSERT INTO child VALUES (60, 6, false, 'o'); COMMIT",
        "DELETE FROM org WHERE id = 3",
    ];
    for step in steps {
        fx.db.batch_execute(step).await.unwrap();
        let expected = child_ids(&fx.db, filter).await;
        client.converge(&fx.http, &expected).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subsets_of_a_subquery_shape_carry_tags_and_refuse_subqueries() {
    let fx = fixture(SCHEMA).await;
    let client = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
    let tag_of = |id: &str| {
        client
            .state
            .rows
            .values()
            .find(|r| r.value["id"] == id)
            .unwrap()
            .tags[0][0]
            .clone()
    };
    let subset = fx
        .get(&format!(
            "{IN_ACTIVE}&offset=-1&subset__where=id%20%3E%2015"
        ))
        .await;
    assert_eq!(subset.status, 200, "{}", subset.body);
    let data = subset.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{data:?}");
    assert_eq!(data[0]["value"]["id"], "30");
    assert_eq!(
        data[0]["headers"]["tags"],
        serde_json::json!([tag_of("30")])
    );
    assert_eq!(
        data[0]["headers"]["active_conditions"],
        serde_json::json!([true])
    );

    let refused = fx
        .get(&format!(
            "{IN_ACTIVE}&offset=-1&subset__where={}",
            urlencode("id IN (SELECT id FROM parent)")
        ))
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.body["errors"]["subset"]["where"],
        serde_json::json!(["Subqueries are not allowed in subsets"]),
        "{}",
        refused.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_or_altered_subquery_table_ends_the_shapes_reading_it() {
    let fx = fixture(SCHEMA).await;
    for (step, why) in [
        ("TRUNCATE parent", "truncated"),
        // The next change to the table describes it anew.
        (
            "ALTER TABLE parent DROP COLUMN active; INSERT INTO parent VALUES (98, 1)",
            "altered",
        ),
    ] {
        let mut client = Client::start(&fx.http, &base(&fx), IN_ACTIVE).await;
        fx.db.batch_execute(step).await.unwrap();
        let mut status = Ok(Vec::new());
        for _ in 0..10 {
            status = client.request(&fx.http, true).await;
            if status.is_err() {
                break;
            }
        }
        assert_eq!(status.err(), Some(409), "{why} parent table");
        if why == "truncated" {
            fx.db
                .batch_execute("INSERT INTO parent VALUES (1, true, 7), (3, true, 8)")
                .await
                .unwrap();
        }
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subqueries_electric_rejects_are_rejected_with_its_texts() {
    let fx = fixture(SCHEMA).await;
    let cases = [
        (
            "table=child&where=".to_owned() + &urlencode("EXISTS (SELECT id FROM parent)"),
            "where",
            "At location 0: only `value IN (SELECT ...)` sublinks are supported right now",
        ),
        (
            "table=child&where=".to_owned() + &urlencode("parent_id IN (SELECT id FROM nope)"),
            "table",
            "Table \"public\".\"nope\" does not exist. If the table name contains capitals or special characters you must quote it.",
        ),
        (
            "table=child&experimental_compaction=true&where=".to_owned()
                + &urlencode("parent_id IN (SELECT id FROM parent)"),
            "experimental_compaction",
            "can't be enabled for shapes with subqueries",
        ),
    ];
    for (query, key, text) in cases {
        let r = fx.get(&format!("{query}&offset=-1")).await;
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert_eq!(r.body["errors"][key], serde_json::json!([text]), "{query}");
    }
}

/// SIGKILL at random points while parents flip: after each restart every client resumes with its
/// handle and ends with exactly the rows `SELECT` gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subquery_shapes_survive_sigkill_during_moves() {
    let cluster = tokio::task::spawn_blocking(syncline_testkit::PgCluster::start)
        .await
        .unwrap();
    let db = cluster.connect("postgres").await;
    let mut setup = String::from(
        "CREATE TABLE parent (id int PRIMARY KEY, active bool NOT NULL, value int);
         CREATE TABLE child (id int PRIMARY KEY, parent_id int, urgent bool NOT NULL DEFAULT false, title text);",
    );
    for p in 0..20 {
        setup.push_str(&format!(
            "INSERT INTO parent VALUES ({p}, {}, {});",
            p % 2 == 0,
            p % 3
        ));
    }
    for c in 0..200 {
        setup.push_str(&format!(
            "INSERT INTO child VALUES ({c}, {}, {}, 't{c}');",
            c % 20,
            c % 7 == 0
        ));
    }
    db.batch_execute(&setup).await.unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap().keep();
    println!("server logs in {}", logs.display());
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = cluster.connection_string("postgres");
    let port = free_port();
    let shapes = [
        "parent_id IN (SELECT id FROM parent WHERE active)",
        "parent_id NOT IN (SELECT id FROM parent WHERE active) AND urgent",
        "parent_id IN (SELECT id FROM parent WHERE value = 1) OR urgent",
        "parent_id IN (SELECT id FROM parent WHERE value IN (SELECT value FROM parent WHERE active))",
    ];
    let seed: u64 = std::env::var("SYNCLINE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed {seed} (SYNCLINE_TEST_SEED replays)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut server = Syncline::start(&url, storage.path(), port, &logs.join("0.log"));
    server.wait_active(&http).await;
    let base = format!("http://127.0.0.1:{port}");
    let mut clients = Vec::new();
    for s in shapes {
        clients.push(
            Client::start(&http, &base, &format!("table=child&where={}", urlencode(s))).await,
        );
    }
    let handles: Vec<String> = clients.iter().map(|c| c.handle.clone()).collect();
    for round in 1..=20 {
        // A burst of flips and child changes, the server killed somewhere inside it.
        let writes = rng.gen_range(5..30);
        let kill_after = rng.gen_range(0..writes);
        for w in 0..writes {
            let p = rng.gen_range(0..20);
            let statement = match rng.gen_range(0..4) {
                0 | 1 => format!("UPDATE parent SET active = NOT active WHERE id = {p}"),
                2 => format!(
                    "UPDATE parent SET value = {} WHERE id = {p}",
                    rng.gen_range(0..3)
                ),
                _ => format!(
                    "UPDATE child SET parent_id = {p}, urgent = NOT urgent WHERE id = {}",
                    rng.gen_range(0..200)
                ),
            };
            db.batch_execute(&statement).await.unwrap();
            if w == kill_after {
                tokio::time::sleep(Duration::from_millis(rng.gen_range(0..30))).await;
                server.kill();
                server = Syncline::start(
                    &url,
                    storage.path(),
                    port,
                    &logs.join(format!("{round}.log")),
                );
            }
        }
        server.wait_active(&http).await;
        println!("round {round}: {writes} writes, killed after {kill_after}");
        for (client, filter) in clients.iter_mut().zip(shapes) {
            let expected = child_ids(&db, filter).await;
            client.converge(&http, &expected).await;
        }
    }
    for (client, handle) in clients.iter().zip(handles) {
        assert_eq!(
            client.handle, handle,
            "the shape kept its handle through every restart"
        );
    }
    std::fs::remove_dir_all(&logs).unwrap();
}
