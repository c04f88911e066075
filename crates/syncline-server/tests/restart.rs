//! The `syncline` binary killed with SIGKILL and started again on the same storage: shapes
//! resume from disk under their handles, nothing is lost or repeated, no snapshot is redone.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::process::{free_port, table_titles, Follower, Syncline};
use serde_json::Value;
use syncline_testkit::PgCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_resume_from_disk_after_sigkill() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
         INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 300) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let url = cluster.connection_string("postgres");
    let http = common::http_client();
    let port = free_port();
    let logs = tempfile::Builder::new()
        .prefix("syncline-restart-")
        .tempdir()
        .unwrap()
        .keep();
    let server = Syncline::start(&url, storage.path(), port, &logs.join("first.log"));
    server.wait_active(&http).await;

    let mut followers = Vec::new();
    for (query, filter) in [
        ("table=items", "true"),
        ("table=items&where=id%20%25%203%20%3D%200", "id % 3 = 0"),
    ] {
        let mut f = Follower::start(query, &server, &http).await;
        f.catch_up(&server, &http).await.unwrap();
        assert_eq!(f.titles(), table_titles(&db, filter).await);
        followers.push((f, filter));
    }

    for i in 0..20 {
        db.batch_execute(&format!(
            "INSERT INTO items VALUES ({0}, 'new {0}'); UPDATE items SET title = 'changed {i}' WHERE id = {1}; \
             DELETE FROM items WHERE id = {2};",
            1000 + i,
            10 + i,
            200 + i
        ))
        .await
        .unwrap();
    }
    for (f, _) in &mut followers {
        f.catch_up(&server, &http).await.unwrap();
    }
    let handles: Vec<String> = followers.iter().map(|(f, _)| f.handle.clone()).collect();
    let writer_db = cluster.connect("postgres").await;
    let writer = tokio::spawn({
        let db = writer_db;
        async move {
            for i in 0..200 {
                db.batch_execute(&format!(
                    "INSERT INTO items VALUES ({0}, 'late {0}'); UPDATE items SET title = 'late change {i}' WHERE id = {1};",
                    2000 + i,
                    30 + i
                ))
                .await
                .unwrap();
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    writer.await.unwrap();

    let server = Syncline::start(&url, storage.path(), port, &logs.join("second.log"));
    server.wait_active(&http).await;
    for ((f, filter), handle) in followers.iter_mut().zip(&handles) {
        f.catch_up(&server, &http)
            .await
            .expect("the old handle resumes after the restart");
        assert_eq!(&f.handle, handle);
        f.converge(&server, &http, &table_titles(&db, filter).await, &logs)
            .await;
    }
    let metrics = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("syncline_snapshot_rows_total 0"),
        "no snapshot was redone:\n{metrics}"
    );
    std::fs::remove_dir_all(&logs).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_whose_columns_changed_while_down_are_dropped() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL, n int);
         INSERT INTO items SELECT g, 'row ' || g, g FROM generate_series(1, 10) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let url = cluster.connection_string("postgres");
    let http = common::http_client();
    let port = free_port();
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("first.log"));
    server.wait_active(&http).await;
    let mut followers = Vec::new();
    for query in [
        "table=items&columns=id,title",
        "table=items&columns=id,title&where=n%20%3E%203",
        "table=items",
    ] {
        let mut f = Follower::start(query, &server, &http).await;
        f.catch_up(&server, &http).await.unwrap();
        followers.push(f);
    }
    server.kill();
    db.batch_execute("ALTER TABLE items ALTER COLUMN n TYPE bigint")
        .await
        .unwrap();
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("second.log"));
    server.wait_active(&http).await;
    let mut statuses = Vec::new();
    for f in &mut followers {
        statuses.push(f.catch_up(&server, &http).await.err().unwrap_or(200));
    }
    assert_eq!(
        statuses,
        [200, 409, 409],
        "only the shape that does not read n survives; logs in {}",
        logs.keep().display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_made_before_and_after_a_column_was_added_all_resume() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
         INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 20) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let url = cluster.connection_string("postgres");
    let http = common::http_client();
    let port = free_port();
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("first.log"));
    server.wait_active(&http).await;
    // Shapes made on the table as it was, then on the table with a column more: each stored
    // shape carries the table as it was made, and restored in storage order the two kinds mix.
    let mut followers = Vec::new();
    for k in 0..6 {
        let query = format!("table=items&columns=id,title&where=id%20%3E%20{k}");
        let mut f = Follower::start(&query, &server, &http).await;
        f.catch_up(&server, &http).await.unwrap();
        followers.push(f);
    }
    db.batch_execute("ALTER TABLE items ADD COLUMN note text")
        .await
        .unwrap();
    for k in 0..6 {
        let query = format!("table=items&columns=id,note&where=id%20%3C%20{}", 20 - k);
        let mut f = Follower::start(&query, &server, &http).await;
        f.catch_up(&server, &http).await.unwrap();
        followers.push(f);
    }
    server.kill();
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("second.log"));
    server.wait_active(&http).await;
    let mut statuses = Vec::new();
    for f in &mut followers {
        statuses.push(f.catch_up(&server, &http).await.err().unwrap_or(200));
    }
    assert_eq!(
        statuses,
        [200; 12],
        "every shape resumes, the newer ones included; logs in {}",
        logs.keep().display()
    );
}

/// The stored handles: metadata files and shape logs.
fn stored(storage: &Path) -> (Vec<String>, Vec<String>) {
    let names = |dir: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(storage.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    (names("shapes"), names("logs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_lifecycle_steps_leaves_nothing_behind() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
         INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 20) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let url = cluster.connection_string("postgres");
    let http = common::http_client();
    let port = free_port();
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("first.log"));
    server.wait_active(&http).await;
    let mut followers = Vec::new();
    for n in 0..4 {
        let query = format!("table=items&where=id%20%3E%20{n}");
        let mut f = Follower::start(&query, &server, &http).await;
        f.catch_up(&server, &http).await.unwrap();
        followers.push(f);
    }
    server.kill();

    // Each shape is left as a crash between two lifecycle steps would leave it.
    let meta = |handle: &str| storage.path().join("shapes").join(format!("{handle}.json"));
    let log = |handle: &str| storage.path().join("logs").join(handle);
    // 1: intact. 2: created, snapshot not yet complete.
    let second = &followers[1].handle;
    let mut record: Value = serde_json::from_slice(&std::fs::read(meta(second)).unwrap()).unwrap();
    record["snapshot_complete"] = Value::Bool(false);
    std::fs::write(meta(second), serde_json::to_vec(&record).unwrap()).unwrap();
    // 3: deleted: metadata removed, log not yet.
    std::fs::remove_file(meta(&followers[2].handle)).unwrap();
    // 4: deleted: metadata removed, log half removed.
    let fourth = &followers[3].handle;
    std::fs::remove_file(meta(fourth)).unwrap();
    let first_file = std::fs::read_dir(log(fourth))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    std::fs::remove_file(first_file.path()).unwrap();
    // 5: created: metadata written, no log yet. 6: a metadata save cut short.
    record["handle"] = Value::String("1-1".into());
    std::fs::write(meta("1-1"), serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::write(storage.path().join("shapes/2-2.json.tmp"), b"{\"trunc").unwrap();
    // 7: a creation a power cut tore (neither its metadata nor its log is synced before the
    // snapshot completes): both files cut short. 8: a creation whose files a power cut took,
    // its log's directory left empty. 9: one whose log the power cut took whole, its
    // metadata cut short.
    std::fs::write(meta("3-3"), b"").unwrap();
    std::fs::create_dir(log("3-3")).unwrap();
    std::fs::write(log("3-3").join("shape.meta"), b"").unwrap();
    std::fs::create_dir(log("4-4")).unwrap();
    std::fs::write(meta("5-5"), b"{\"version\":").unwrap();

    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("second.log"));
    server.wait_active(&http).await;
    let first = followers[0].handle.clone();
    assert_eq!(
        stored(storage.path()),
        (vec![format!("{first}.json")], vec![first.clone()]),
        "only the intact shape is left, metadata and log alike"
    );
    let mut statuses = Vec::new();
    for f in &mut followers {
        statuses.push(f.catch_up(&server, &http).await.err().unwrap_or(200));
    }
    assert_eq!(statuses, [200, 409, 409, 409]);
    for n in 1..4 {
        let query = format!("table=items&where=id%20%3E%20{n}");
        let mut f = Follower::start(&query, &server, &http).await;
        f.catch_up(&server, &http).await.unwrap();
        assert_eq!(f.titles(), table_titles(&db, &format!("id > {n}")).await);
    }
    let (metas, logs_left) = stored(storage.path());
    assert_eq!(metas.len(), 4);
    assert_eq!(
        metas
            .iter()
            .map(|m| m.trim_end_matches(".json").to_owned())
            .collect::<Vec<_>>(),
        logs_left
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_costs_resuming_clients_nothing() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
         INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 50) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let url = cluster.connection_string("postgres");
    let http = common::http_client();
    let port = free_port();
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("first.log"));
    server.wait_active(&http).await;
    let mut f = Follower::start("table=items", &server, &http).await;
    f.catch_up(&server, &http).await.unwrap();
    server.kill();

    // Clients fire as soon as the port accepts, before the server says it is active.
    let server = Syncline::start(&url, storage.path(), port, &logs.path().join("second.log"));
    let resume = server.url(&format!(
        "table=items&offset={}&handle={}",
        f.offset, f.handle
    ));
    let initial = server.url("table=items&offset=-1");
    let mut clients = Vec::new();
    for i in 0..300 {
        let url = if i % 10 == 0 { &initial } else { &resume }.clone();
        let http = http.clone();
        clients.push(tokio::spawn(async move {
            for _ in 0..200 {
                if let Ok(r) = http.get(&url).send().await {
                    let handle = r
                        .headers()
                        .get("electric-handle")
                        .map(|h| h.to_str().unwrap().to_owned());
                    return (r.status().as_u16(), handle);
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("the server never accepted");
        }));
    }
    let mut answers = BTreeMap::new();
    for client in clients {
        *answers.entry(client.await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        answers,
        BTreeMap::from([((200, Some(f.handle.clone())), 300)]),
        "every client resumes the restored shape"
    );
    let (metas, _) = stored(storage.path());
    assert_eq!(metas, [format!("{}.json", f.handle)], "no second shape");
}
