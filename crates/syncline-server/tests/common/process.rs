//! The `syncline` binary as a process of its own, and a client following a shape through it.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;

/// A running `syncline serve` process.
pub struct Syncline {
    pub child: Child,
    pub port: u16,
}

impl Syncline {
    /// Starts the binary; its log goes to `log` (named in failure messages).
    pub fn start(database_url: &str, storage: &Path, port: u16, log: &Path) -> Syncline {
        let mut command = Command::new(env!("CARGO_BIN_EXE_syncline"));
        command.arg("serve");
        Self::spawn(command, database_url, storage, port, log)
    }

    /// Runs `command` (the binary's `serve`, perhaps wrapped) with the tests' settings.
    pub fn spawn(
        mut command: Command,
        database_url: &str,
        storage: &Path,
        port: u16,
        log: &Path,
    ) -> Syncline {
        let log = std::fs::File::create(log).unwrap();
        let child = command
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

    pub fn url(&self, query: &str) -> String {
        format!("http://127.0.0.1:{}/v1/shape?{query}", self.port)
    }

    pub async fn wait_active(&self, http: &reqwest::Client) {
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

    pub fn kill(mut self) {
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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// How long [`Follower::converge`] follows a shape before it reports the difference, and
/// [`Follower::catch_up`] reads before it reports that it never got up to date.
const CONVERGE_WITHIN: Duration = Duration::from_secs(60);

/// What a client following one shape holds.
pub struct Follower {
    pub query: String,
    pub handle: String,
    pub offset: String,
    pub rows: BTreeMap<String, Value>,
}

impl Follower {
    /// A client that has read a shape's first response (`offset=-1`).
    pub async fn start(query: &str, server: &Syncline, http: &reqwest::Client) -> Follower {
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
    pub async fn catch_up(&mut self, server: &Syncline, http: &reqwest::Client) -> Result<(), u16> {
        let deadline = std::time::Instant::now() + CONVERGE_WITHIN;
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "{} not up to date after {CONVERGE_WITHIN:?} (at offset {})",
                self.query,
                self.offset
            );
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
    /// the server has processed so far, e.g. while a restarted server replays the slot), for up
    /// to [`CONVERGE_WITHIN`]: a loaded machine answers with less at a time, not wrongly.
    pub async fn converge(
        &mut self,
        server: &Syncline,
        http: &reqwest::Client,
        expected: &BTreeMap<String, String>,
        logs: &Path,
    ) {
        let deadline = std::time::Instant::now() + CONVERGE_WITHIN;
        while std::time::Instant::now() < deadline {
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
        if &got == expected {
            return;
        }
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

    pub fn apply(&mut self, m: &Value) {
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

    pub fn titles(&self) -> BTreeMap<String, String> {
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

pub async fn table_titles(db: &tokio_postgres::Client, filter: &str) -> BTreeMap<String, String> {
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
