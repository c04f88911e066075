//! The `syncline` binary killed with SIGKILL and started again on the same storage: shapes
//! resume from disk under their handles, nothing is lost or repeated, no snapshot is redone.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;
use syncline_testkit::PgCluster;

/// A running `syncline serve` process.
struct Syncline {
    child: Child,
    port: u16,
}

impl Syncline {
    /// Starts the binary; its log goes to `log` (named in failure messages).
    fn start(database_url: &str, storage: &Path, port: u16, log: &Path) -> Syncline {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_syncline"))
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("ELECTRIC_PORT", port.to_string())
            .env("ELECTRIC_INSECURE", "true")
            .env("ELECTRIC_STORAGE_DIR", storage)
            .env("ELECTRIC_SHAPE_CHUNK_BYTES_THRESHOLD", "10000")
            .env("ELECTRIC_LONG_POLL_TIMEOUT", "1000")
            .env("ELECTRIC_REPLICATION_STREAM_ID", "restart")
            .env("SYNCLINE_LISTEN_ADDRESS", "127.0.0.1")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("syncline starts");
        Syncline { child, port }
    }

    fn url(&self, query: &str) -> String {
        format!("http://127.0.0.1:{}/v1/shape?{query}", self.port)
    }

    async fn wait_active(&self, http: &reqwest::Client) {
        let health = format!("http://127.0.0.1:{}/v1/health", self.port);
        for _ in 0..300 {
            if let Ok(r) = http.get(&health).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("syncline did not become active");
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

impl Drop for Syncline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What a client following one shape holds.
struct Follower {
    query: String,
    handle: String,
    offset: String,
    rows: BTreeMap<String, Value>,
}

impl Follower {
    /// A client that has read a shape's first response (`offset=-1`).
    async fn start(query: &str, server: &Syncline, http: &reqwest::Client) -> Follower {
        let first = http
            .get(server.url(&format!("{query}&offset=-1")))
            .send()
            .await
            .unwrap();
        let header = |name: &str| first.headers()[name].to_str().unwrap().to_owned();
        let mut f = Follower {
            query: query.to_owned(),
            handle: header("electric-handle"),
            offset: header("electric-offset"),
            rows: BTreeMap::new(),
        };
        let body: Value = serde_json::from_str(&first.text().await.unwrap()).unwrap();
        for m in body.as_array().unwrap() {
            f.apply(m);
        }
        f
    }

    /// Reads until up-to-date, applying changes; returns the status that stopped it early, if
    /// any (e.g. 409).
    async fn catch_up(&mut self, server: &Syncline, http: &reqwest::Client) -> Result<(), u16> {
        loop {
            let url = server.url(&format!(
                "{}&offset={}&handle={}",
                self.query, self.offset, self.handle
            ));
            let r = http.get(url).send().await.unwrap();
            if r.status() != 200 {
                return Err(r.status().as_u16());
            }
            self.handle = r.headers()["electric-handle"].to_str().unwrap().to_owned();
            self.offset = r.headers()["electric-offset"].to_str().unwrap().to_owned();
            let done = r.headers().contains_key("electric-up-to-date");
            let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
            for m in body.as_array().unwrap() {
                self.apply(m);
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Follows the shape live until its rows equal `expected` (an up-to-date only promises what
    /// the server has processed so far, e.g. while a restarted server replays the slot).
    async fn converge(
        &mut self,
        server: &Syncline,
        http: &reqwest::Client,
        expected: &BTreeMap<String, String>,
        logs: &Path,
    ) {
        for _ in 0..50 {
            if &self.titles() == expected {
                return;
            }
            let url = server.url(&format!(
                "{}&offset={}&handle={}&live=true",
                self.query, self.offset, self.handle
            ));
            let r = http.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            self.offset = r.headers()["electric-offset"].to_str().unwrap().to_owned();
            let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
            for m in body.as_array().unwrap() {
                self.apply(m);
            }
        }
        let got = self.titles();
        let differences: Vec<String> = expected
            .iter()
            .filter(|(id, title)| got.get(*id) != Some(title))
            .map(|(id, title)| format!("{id}: {:?} instead of {title:?}", got.get(id)))
            .chain(
                got.keys()
                    .filter(|id| !expected.contains_key(*id))
                    .map(|id| format!("{id}: not in the table")),
            )
            .collect();
        panic!(
            "{} differs from the table (server logs in {}): {differences:?}",
            self.query,
            logs.display()
        );
    }

    fn apply(&mut self, m: &Value) {
        let Some(key) = m["key"].as_str() else {
            return;
        };
        let key = key.to_owned();
        match m["headers"]["operation"].as_str().unwrap() {
            "insert" => {
                let previous = self.rows.insert(key.clone(), m["value"].clone());
                assert!(previous.is_none(), "duplicate insert of {key}");
            }
            "update" => {
                let row = self.rows.get_mut(&key).expect("update of a known row");
                for (k, v) in m["value"].as_object().unwrap() {
                    row[k] = v.clone();
                }
            }
            "delete" => {
                assert!(self.rows.remove(&key).is_some(), "delete of an unknown row");
            }
            other => panic!("operation {other}"),
        }
    }

    fn titles(&self) -> BTreeMap<String, String> {
        self.rows
            .values()
            .map(|v| {
                (
                    v["id"].as_str().unwrap().to_owned(),
                    v["title"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

async fn table_titles(db: &tokio_postgres::Client, filter: &str) -> BTreeMap<String, String> {
    db.query(
        &format!("SELECT id::text, title FROM items WHERE {filter}"),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

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
    let http = reqwest::Client::new();
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
    let http = reqwest::Client::new();
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
