//! Postgres going away and coming back: the server reports it on `/v1/health`, keeps serving
//! what it has, and picks up where it left off. A normal shutdown (fast) is survived like an
//! immediate one, with writes going on; every client ends equal to `SELECT`.

mod common;

use std::time::Duration;

use common::fixture;
use common::process::{free_port, table_titles, Follower, Syncline};
use syncline_testkit::{PgCluster, ShutdownMode};

async fn health(f: &common::Fixture) -> (u16, serde_json::Value) {
    let r = f
        .http
        .get(format!("http://{}/v1/health", f.server.addr))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.text().await.unwrap()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_a_database_outage() {
    let mut f = fixture("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);").await;
    let (handle, offset, _) = f.sync("table=t").await;
    tokio::task::block_in_place(|| f._cluster.stop(ShutdownMode::Fast));
    let mut seen = (0, serde_json::Value::Null);
    for _ in 0..100 {
        seen = health(&f).await;
        if seen.0 == 202 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen.0, 202, "{}", seen.1);
    assert_eq!(
        seen.1["status"], "starting",
        "Electric's status for a lost stream"
    );
    assert!(
        seen.1["reason"].as_str().unwrap().contains("replication"),
        "{}",
        seen.1
    );
    let metrics = f
        .http
        .get(format!("http://{}/metrics", f.server.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"syncline_health{status="starting"} 1"#),
        "{metrics}"
    );
    // What the server has is still served.
    let read = f
        .get(&format!("table=t&offset={offset}&handle={handle}"))
        .await;
    assert_eq!(read.status, 200);

    tokio::task::block_in_place(|| f._cluster.restart());
    for _ in 0..200 {
        if health(&f).await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health(&f).await.1["status"], "active");
    let db = f._cluster.connect("postgres").await;
    db.batch_execute("INSERT INTO t VALUES (2)").await.unwrap();
    let live = f
        .get(&format!("table=t&offset={offset}&handle={handle}&live"))
        .await;
    assert_eq!(live.changes().len(), 1, "{}", live.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_and_immediate_shutdowns_during_writes_lose_nothing() {
    let mut cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let setup = cluster.connect("postgres").await;
    setup
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
             INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 20) g;",
        )
        .await
        .unwrap();
    drop(setup);
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::Builder::new()
        .prefix("syncline-outage-")
        .tempdir()
        .unwrap()
        .keep();
    let port = free_port();
    let server = Syncline::start(
        &cluster.url("postgres"),
        storage.path(),
        port,
        &logs.join("server.log"),
    );
    let http = common::http_client();
    server.wait_active(&http).await;
    let mut follower = Follower::start("table=items", &server, &http).await;
    follower.catch_up(&server, &http).await.unwrap();

    let mut next_id = 1_000;
    for mode in [
        ShutdownMode::Fast,
        ShutdownMode::Immediate,
        ShutdownMode::Fast,
    ] {
        // Writes before, and then again after, the shutdown; each on a session of its own.
        for _ in 0..20 {
            let db = cluster.connect("postgres").await;
            db.batch_execute(&format!(
                "INSERT INTO items VALUES ({next_id}, 'new'); UPDATE items SET title = 'changed {next_id}' WHERE id = {}",
                next_id % 20 + 1
            ))
            .await
            .unwrap();
            next_id += 1;
        }
        tokio::task::block_in_place(|| {
            cluster.stop(mode);
            std::thread::sleep(Duration::from_millis(500));
            cluster.restart();
        });
        assert!(
            server_alive(&server),
            "the server survived a {mode:?} shutdown; logs in {}",
            logs.display()
        );
    }
    let db = cluster.connect("postgres").await;
    db.batch_execute("INSERT INTO items VALUES (5000, 'last')")
        .await
        .unwrap();
    follower
        .converge(&server, &http, &table_titles(&db, "true").await, &logs)
        .await;
    std::fs::remove_dir_all(&logs).unwrap();
}

fn server_alive(server: &Syncline) -> bool {
    std::fs::metadata(format!("/proc/{}", server.child.id())).is_ok()
        && !std::fs::read_to_string(format!("/proc/{}/stat", server.child.id()))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Snapshots reuse idle query connections; one that Postgres closed while it was idle is
/// replaced, and the next shape is made as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_connection_closed_while_idle_is_replaced() {
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2);").await;
    let (_, _, first) = f.sync("table=t&where=id=1").await;
    assert_eq!(first.len(), 1);
    let backends =
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'syncline-snapshot'";
    let idle: i64 = f.db.query_one(backends, &[]).await.unwrap().get(0);
    assert_eq!(
        idle, 1,
        "the first snapshot's connection waits for the next"
    );
    let (_, _, second) = f.sync("table=t&where=id=2").await;
    assert_eq!(second.len(), 1);
    let idle: i64 = f.db.query_one(backends, &[]).await.unwrap().get(0);
    assert_eq!(idle, 1, "the second snapshot reused it");
    let closed: bool =
        f.db.query_one(
            "SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'syncline-snapshot'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(closed);
    let (_, _, third) = f.sync("table=t").await;
    assert_eq!(third.len(), 2, "a new connection took the snapshot");
}
