//! Shape storage running out of space: replication pauses (nothing more is acknowledged, so
//! Postgres keeps the WAL), health says why, reads go on, and everything resumes by itself
//! when space returns, with no shape invalidated and no change lost or repeated.
//!
//! The server runs in a user and mount namespace of its own (`unshare -rm`) with its storage on
//! a small tmpfs, so the test needs no privileges; the test frees space through
//! `/proc/<pid>/root`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::process::{free_port, table_titles, Follower, Syncline};
use syncline_testkit::PgCluster;

async fn health(http: &reqwest::Client, port: u16) -> (u16, serde_json::Value) {
    let r = http
        .get(format!("http://127.0.0.1:{port}/v1/health"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.text().await.unwrap()).unwrap(),
    )
}

async fn confirmed_flush_lsn(db: &tokio_postgres::Client) -> String {
    db.query_one(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'syncline_slot_restart'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pauses_replication_and_it_resumes_by_itself() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
         INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 50) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    // Kept on failure, for the server's log.
    let logs = tempfile::Builder::new()
        .prefix("syncline-full-")
        .tempdir()
        .unwrap()
        .keep();
    let port = free_port();
    let mut command = Command::new("unshare");
    command.args(["-rm", "sh", "-c"]).arg(format!(
        "mount -t tmpfs -o size=16m tmpfs '{dir}' && \
         dd if=/dev/zero of='{dir}/filler' bs=1M count=13 status=none; \
         exec '{bin}' serve",
        dir = storage.path().display(),
        bin = env!("CARGO_BIN_EXE_syncline"),
    ));
    // TCP: the unix socket's directory belongs to a user the namespace does not map.
    let url = cluster.url("postgres");
    let server = Syncline::spawn(
        command,
        &url,
        storage.path(),
        port,
        &logs.join("server.log"),
    );
    let http = common::http_client();
    server.wait_active(&http).await;
    let mut follower = Follower::start("table=items", &server, &http).await;
    follower.catch_up(&server, &http).await.unwrap();
    let handle = follower.handle.clone();

    let mut batch = 0;
    let full = loop {
        db.batch_execute(&format!(
            "INSERT INTO items SELECT g, repeat('x', 1000) FROM generate_series({0}, {0} + 199) g",
            1000 + batch * 200
        ))
        .await
        .unwrap();
        batch += 1;
        let (status, body) = health(&http, port).await;
        if status == 503 {
            break body;
        }
        assert!(
            batch < 100,
            "the disk never filled; logs in {}",
            logs.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(full["status"], "degraded", "{full}");
    assert!(
        full["reason"].as_str().unwrap().contains("No space left"),
        "{full}"
    );
    let log = std::fs::read_to_string(logs.join("server.log")).unwrap();
    assert!(
        log.contains("ERROR") && log.contains("shape storage is full"),
        "{log}"
    );

    // Nothing more is acknowledged while paused, whatever Postgres writes.
    let paused_at = confirmed_flush_lsn(&db).await;
    db.batch_execute("UPDATE items SET title = 'changed while full' WHERE id <= 10")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(confirmed_flush_lsn(&db).await, paused_at);
    // Reads are still served; new shapes wait for storage.
    let read = http
        .get(server.url("table=items&offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let new_shape = http
        .get(server.url("table=items&where=id%20%3C%205&offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(new_shape.status(), 503);

    let filler = format!(
        "/proc/{}/root{}/filler",
        server.child.id(),
        storage.path().display()
    );
    std::fs::remove_file(&filler).unwrap();
    for _ in 0..200 {
        if health(&http, port).await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health(&http, port).await.1["status"], "active");
    // The replay after the pause may take a while: catch up until the table's rows are in.
    let expected = table_titles(&db, "true").await;
    for _ in 0..300 {
        follower
            .catch_up(&server, &http)
            .await
            .expect("the shape was never invalidated");
        if follower.titles() == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    follower
        .converge(&server, &http, &table_titles(&db, "true").await, &logs)
        .await;
    assert_eq!(follower.handle, handle, "the shape was never invalidated");
    std::fs::remove_dir_all(&logs).unwrap();
}
