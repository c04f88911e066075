//! Clients that hold connections without reading, or without finishing a request, cannot make
//! the server unreachable: the send timeout closes stalled responses, the idle timeout closes
//! slow and idle connections, a reserve keeps health and metrics reachable past the connection
//! limit, and accept keeps working at the open-files limit.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::process::{free_port, Syncline};
use syncline_testkit::PgCluster;

/// A `syncline serve` with `open_files` descriptors, a 4 MB chunk threshold, a 2 s send
/// timeout and a 3 s idle timeout.
fn start(
    cluster: &PgCluster,
    storage: &std::path::Path,
    log: &std::path::Path,
    open_files: u32,
) -> Syncline {
    raise_own_open_files_limit();
    let port = free_port();
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new("prlimit")
        .arg(format!("--nofile={open_files}:{open_files}"))
        .args([env!("CARGO_BIN_EXE_syncline"), "serve"])
        .env("DATABASE_URL", cluster.connection_string("postgres"))
        .env("ELECTRIC_PORT", port.to_string())
        .env("ELECTRIC_INSECURE", "true")
        .env("ELECTRIC_STORAGE_DIR", storage)
        .env("ELECTRIC_SHAPE_CHUNK_BYTES_THRESHOLD", "4000000")
        .env("ELECTRIC_TCP_SEND_TIMEOUT", "2s")
        .env("SYNCLINE_HTTP_IDLE_TIMEOUT", "3s")
        .env("SYNCLINE_LISTEN_ADDRESS", "127.0.0.1")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Syncline { child, port }
}

/// Lets this test process hold thousands of client sockets.
fn raise_own_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    assert!(limit.rlim_cur >= 4_000, "the tests need 4,000 descriptors");
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn get(http: &reqwest::Client, url: &str) -> Result<u16, reqwest::Error> {
    Ok(http.get(url).send().await?.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_stalled_readers_cannot_take_the_server_down() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE big (id int PRIMARY KEY, pad text);
         INSERT INTO big SELECT g, repeat('x', 1000) FROM generate_series(1, 3000) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = start(
        &cluster,
        storage.path(),
        &logs.path().join("server.log"),
        1024,
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    server.wait_active(&http).await;
    let shape = server.url("table=big&offset=-1");
    assert_eq!(get(&http, &shape).await.unwrap(), 200);
    let pid = server.child.id();
    let idle_descriptors = open_descriptors(pid);

    // 2,000 clients ask for 3 MB each and never read a byte.
    let port = server.port;
    let stalled = tokio::task::spawn_blocking(move || {
        let request = "GET /v1/shape?table=big&offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n";
        (0..2_000)
            .filter_map(|_| {
                let mut socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
                socket.write_all(request.as_bytes()).ok()?;
                Some(socket)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert!(stalled.len() > 1_000, "{} connected", stalled.len());
    let started = Instant::now();
    let health = format!("http://127.0.0.1:{port}/v1/health");
    assert_eq!(
        get(&http, &health).await.unwrap(),
        200,
        "health stays reachable"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let peak_rss = rss_kib(pid);
    assert!(
        peak_rss < 400 * 1024,
        "{peak_rss} KiB resident with stalled readers"
    );

    // The send timeout closes the stalled responses (those accepted last within 2 s of their
    // accept): descriptors come back, clients get served.
    let mut descriptors = open_descriptors(pid);
    for _ in 0..60 {
        if descriptors < idle_descriptors + 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        descriptors = open_descriptors(pid);
    }
    assert_eq!(get(&http, &shape).await.unwrap(), 200);
    assert!(
        descriptors < idle_descriptors + 50,
        "{descriptors} descriptors open (idle: {idle_descriptors})"
    );
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_and_idle_connections_do_not_stop_a_normal_client() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);")
        .await
        .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = start(
        &cluster,
        storage.path(),
        &logs.path().join("server.log"),
        8192,
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    server.wait_active(&http).await;
    let pid = server.child.id();
    let idle_descriptors = open_descriptors(pid);
    let port = server.port;
    // 3,000 connections that send half a request head, or nothing at all.
    let slow = tokio::task::spawn_blocking(move || {
        (0..3_000)
            .filter_map(|i| {
                let mut socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
                if i % 2 == 0 {
                    socket
                        .write_all(b"GET /v1/shape?table=t&offset=-1 HTTP/1.1\r\nX-Slow: ")
                        .ok()?;
                }
                Some(socket)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(slow.len(), 3_000);
    let started = Instant::now();
    assert_eq!(
        get(&http, &server.url("table=t&offset=-1")).await.unwrap(),
        200
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a normal client is served at once"
    );
    // The idle timeout (3 s) closes them all.
    let mut descriptors = open_descriptors(pid);
    for _ in 0..60 {
        if descriptors < idle_descriptors + 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        descriptors = open_descriptors(pid);
    }
    assert!(
        descriptors < idle_descriptors + 50,
        "{descriptors} descriptors open (idle: {idle_descriptors})"
    );
    drop(slow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_shapes_fit_in_few_descriptors() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, n int);
         INSERT INTO t SELECT g, 0 FROM generate_series(1, 300) g;",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = start(
        &cluster,
        storage.path(),
        &logs.path().join("server.log"),
        256,
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    server.wait_active(&http).await;
    let pid = server.child.id();
    // 300 shapes, one row each, under 256 descriptors.
    let mut shapes = Vec::new();
    for id in 1..=300 {
        let query = format!("table=t&where=id%20%3D%20{id}");
        let r = http
            .get(server.url(&format!("{query}&offset=-1")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "shape {id}: {}", r.text().await.unwrap());
        let handle = r.headers()["electric-handle"].to_str().unwrap().to_owned();
        shapes.push((query, handle));
    }
    // Every shape gets a change, ten shapes a transaction (a transaction needs the logs it
    // touches open at once); each follows it to the new value.
    for first in (1..=300).step_by(10) {
        db.batch_execute(&format!(
            "UPDATE t SET n = 1 WHERE id BETWEEN {first} AND {}",
            first + 9
        ))
        .await
        .unwrap();
    }
    for (query, handle) in &shapes {
        let mut offset = "0_inf".to_owned();
        let mut seen = false;
        for _ in 0..20 {
            let r = http
                .get(server.url(&format!("{query}&offset={offset}&handle={handle}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{query}");
            offset = r.headers()["electric-offset"].to_str().unwrap().to_owned();
            let body = r.text().await.unwrap();
            if body.contains(r#""n":"1""#) {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(seen, "{query} got its change");
    }
    let descriptors = open_descriptors(pid);
    assert!(descriptors < 200, "{descriptors} descriptors open");
}
