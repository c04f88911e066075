//! Start-up against a database that is not there yet: the server waits, says so on
//! `/v1/health`, and replicates once Postgres can be reached.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use syncline_server::startup::start;
use syncline_testkit::PgCluster;
use tokio::net::{TcpListener, TcpStream};

/// A TCP port that refuses Postgres connections (closing them at once) until `open` is set,
/// then forwards them to `target`.
async fn gate(target: u16, open: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            if !open.load(Ordering::SeqCst) {
                continue;
            }
            tokio::spawn(async move {
                let mut server = TcpStream::connect(("127.0.0.1", target)).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    port
}

async fn health(http: &reqwest::Client, addr: std::net::SocketAddr) -> (u16, serde_json::Value) {
    let r = http
        .get(format!("http://{addr}/v1/health"))
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
async fn waits_for_postgres_and_says_so() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute("CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items VALUES (1);")
        .await
        .unwrap();
    let open = Arc::new(AtomicBool::new(false));
    let port = gate(cluster.port(), open.clone()).await;
    let storage = tempfile::tempdir().unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let server = start(common::config(&url, storage.path()))
        .await
        .expect("starts without Postgres");
    let http = common::http_client();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = health(&http, server.addr).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "waiting", "{body}");
    assert!(body["reason"].as_str().is_some(), "{body}");
    let shape = http
        .get(format!(
            "http://{}/v1/shape?table=items&offset=-1",
            server.addr
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(shape.status(), 503, "a new shape waits for Postgres");
    assert!(shape.headers().contains_key("retry-after"));
    assert_eq!(shape.headers()["cache-control"], "no-store");

    open.store(true, Ordering::SeqCst);
    for _ in 0..200 {
        if health(&http, server.addr).await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health(&http, server.addr).await.1["status"], "active");
    let shape = http
        .get(format!(
            "http://{}/v1/shape?table=items&offset=-1",
            server.addr
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(shape.status(), 200);
}
