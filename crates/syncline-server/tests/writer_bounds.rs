//! More shapes written than the server keeps writers open, held or parked for: writers are
//! held, parked and closed past their bounds and resumed or reopened by the next change, and
//! every shape still ends up holding exactly what Postgres holds.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{fixture_with, Fixture};
use serde_json::Value;
use syncline_server::shapes::WriterCounts;

const SHAPES: i32 = 10;
const OPEN_MAX: usize = 2;
const HELD_MAX: usize = 2;
const PARKED_MAX: usize = 3;

/// Applies change messages to rows keyed by id: the `v` column, as inserts and updates set it.
fn apply(rows: &mut BTreeMap<i64, String>, changes: &[Value]) {
    for c in changes {
        let value = &c["value"];
        let id: i64 = value["id"].as_str().unwrap().parse().unwrap();
        match c["headers"]["operation"].as_str().unwrap() {
            "delete" => {
                rows.remove(&id);
            }
            _ => {
                if let Some(v) = value["v"].as_str() {
                    rows.insert(id, v.to_owned());
                }
            }
        }
    }
}

/// Follows the shape from `offset` until what it holds equals `g`'s rows in Postgres.
async fn catch_up(
    f: &Fixture,
    query: &str,
    handle: &str,
    mut offset: String,
    rows: &mut BTreeMap<i64, String>,
    g: i32,
) {
    let expected: BTreeMap<i64, String> =
        f.db.query("SELECT id, v FROM items WHERE g = $1", &[&g])
            .await
            .unwrap()
            .into_iter()
            .map(|r| (i64::from(r.get::<_, i32>(0)), r.get(1)))
            .collect();
    let started = Instant::now();
    loop {
        let reply = f
            .get(&format!("{query}&offset={offset}&handle={handle}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let changes: Vec<Value> = reply.changes().into_iter().cloned().collect();
        apply(rows, &changes);
        offset = reply.header("electric-offset").unwrap().to_owned();
        if *rows == expected {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "shape g = {g} never caught up: {rows:?} against {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server's writers once `done` holds for them, or after 10 s.
async fn writers_once(f: &Fixture, done: impl Fn(WriterCounts) -> bool) -> WriterCounts {
    let started = Instant::now();
    loop {
        let writers = f.server.state.shapes.writers();
        if done(writers) || started.elapsed() > Duration::from_secs(10) {
            return writers;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_past_the_writer_bounds_hold_what_postgres_holds() {
    let f = fixture_with(
        &format!(
            "CREATE TABLE items (id int PRIMARY KEY, g int NOT NULL, v text NOT NULL);
             INSERT INTO items SELECT i, i % {SHAPES} + 1, 'initial' FROM generate_series(1, 40) i;"
        ),
        |config| {
            config.open_logs_max = Some(OPEN_MAX);
            config.held_logs_max = Some(HELD_MAX);
            config.parked_logs_max = Some(PARKED_MAX);
        },
    )
    .await;
    let mut shapes = Vec::new();
    for g in 1..=SHAPES {
        let query = format!("table=items&where=g%20%3D%20{g}");
        let (handle, offset, changes) = f.sync(&query).await;
        let mut rows = BTreeMap::new();
        apply(&mut rows, &changes);
        shapes.push((g, query, handle, offset, rows));
    }
    for round in 1..=4 {
        // One transaction reaching every shape, then one per shape in turn.
        f.db.execute(&format!("UPDATE items SET v = 'round {round}'"), &[])
            .await
            .unwrap();
        for g in 1..=SHAPES {
            f.db.execute(
                "INSERT INTO items VALUES ($1, $2, 'new')",
                &[&(1000 * round + g), &g],
            )
            .await
            .unwrap();
        }
        f.db.execute(
            &format!("DELETE FROM items WHERE id = {}", 1000 * round + round),
            &[],
        )
        .await
        .unwrap();
    }
    for (g, query, handle, offset, rows) in &mut shapes {
        catch_up(&f, query, handle, offset.clone(), rows, *g).await;
    }
    let within =
        |w: WriterCounts| w.open <= OPEN_MAX && w.held <= HELD_MAX && w.parked <= PARKED_MAX;
    let writers = writers_once(&f, within).await;
    assert!(within(writers), "{writers:?}: past the bounds");
    assert!(writers.held > 0, "writers are held before they are parked");
    assert!(
        writers.parked > 0,
        "idle writers are parked before they are closed"
    );
}

/// One insert into every one of 120 shapes, by a server whose open-files limit (256) cannot
/// hold 120 open logs (five descriptors each) beside what else it needs: the logs written past
/// the open bound close their files at once, keeping their locks, and every shape gets the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_change_reaching_more_shapes_than_descriptors_allow() {
    let mut l = Limited::start(256, Some(4), 120).await;
    l.change_reaches_every_shape(1, "new").await;
}

/// Writers left unwritten for the idle park interval are parked, well within every bound, so
/// idle shapes hold no file descriptor; the next change resumes them and reaches every shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_writers_are_parked_and_resume() {
    const IDLE: Duration = Duration::from_millis(300);
    const FEW: i32 = 3;
    let f = fixture_with(
        "CREATE TABLE items (id int PRIMARY KEY, g int NOT NULL, v text NOT NULL);
         INSERT INTO items SELECT i, i % 3 + 1, 'initial' FROM generate_series(1, 9) i;",
        |config| config.idle_log_park = IDLE,
    )
    .await;
    let mut shapes = Vec::new();
    for g in 1..=FEW {
        let query = format!("table=items&where=g%20%3D%20{g}");
        let (handle, offset, changes) = f.sync(&query).await;
        let mut rows = BTreeMap::new();
        apply(&mut rows, &changes);
        shapes.push((g, query, handle, offset, rows));
    }
    for round in 1..=2 {
        f.db.execute(&format!("UPDATE items SET v = 'round {round}'"), &[])
            .await
            .unwrap();
        for (g, query, handle, offset, rows) in &mut shapes {
            catch_up(&f, query, handle, offset.clone(), rows, *g).await;
        }
        assert!(
            f.server.state.shapes.writers().open > 0,
            "the change opened the shapes' writers"
        );
        let writers = writers_once(&f, |w| w.open + w.held == 0).await;
        assert_eq!(
            (writers.open, writers.held),
            (0, 0),
            "writers left open or held after 10 s idle"
        );
        assert_eq!(
            writers.parked, FEW as usize,
            "each shape's writer is parked"
        );
    }
}

/// A server run under an open-files limit, its cluster with table `items (id, v)`, and shapes
/// on it (query, handle, offset), each in every row. Fields drop in order: the server first,
/// the cluster last.
struct Limited {
    server: common::process::Syncline,
    http: reqwest::Client,
    port: u16,
    shapes: Vec<(String, String, String)>,
    db: tokio_postgres::Client,
    storage: tempfile::TempDir,
    _cluster: syncline_testkit::PgCluster,
}

impl Limited {
    /// Starts the server with `ulimit -n limit` (and `SYNCLINE_OPEN_LOGS_MAX` if given) and
    /// makes `shapes` shapes.
    async fn start(limit: usize, open_logs_max: Option<usize>, shapes: usize) -> Limited {
        let cluster = tokio::task::spawn_blocking(syncline_testkit::PgCluster::start)
            .await
            .unwrap();
        let db = cluster.connect("postgres").await;
        db.batch_execute("CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL);")
            .await
            .unwrap();
        let storage = tempfile::tempdir().unwrap();
        let mut command = std::process::Command::new("sh");
        command
            .args(["-c", &format!("ulimit -n {limit} && exec \"$0\" serve")])
            .arg(env!("CARGO_BIN_EXE_syncline"));
        if let Some(max) = open_logs_max {
            command.env("SYNCLINE_OPEN_LOGS_MAX", max.to_string());
        }
        let port = common::process::free_port();
        let server = common::process::Syncline::spawn(
            command,
            &cluster.connection_string("postgres"),
            &storage.path().join("data"),
            port,
            &storage.path().join("server.log"),
        );
        let http = common::http_client();
        server.wait_active(&http).await;
        let mut made = Vec::new();
        for k in 0..shapes {
            let query = format!("table=items&where=v%20%3C%3E%20%27x{k}%27");
            let reply = http
                .get(server.url(&format!("{query}&offset=-1")))
                .send()
                .await
                .unwrap();
            assert_eq!(reply.status(), 200);
            let header = |name: &str| reply.headers()[name].to_str().unwrap().to_owned();
            made.push((query, header("electric-handle"), header("electric-offset")));
        }
        Limited {
            server,
            http,
            port,
            shapes: made,
            db,
            storage,
            _cluster: cluster,
        }
    }

    /// `n` TCP connections to the server, sending nothing.
    async fn connect(&self, n: usize) -> Vec<tokio::net::TcpStream> {
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            streams.push(
                tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                    .await
                    .unwrap(),
            );
        }
        streams
    }

    /// `syncline_shape_logs_open` from the server's `/metrics`.
    async fn logs_open(&self) -> usize {
        let text = self
            .http
            .get(format!("http://127.0.0.1:{}/metrics", self.port))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("syncline_shape_logs_open "))
            .unwrap_or_else(|| panic!("no open-logs gauge in {text}"));
        line.split(' ').nth(1).unwrap().parse().unwrap()
    }

    /// Inserts row `id` with `v` and follows every shape until it has it.
    async fn change_reaches_every_shape(&mut self, id: i32, v: &str) {
        self.insert(id, v).await;
        self.every_shape_gets(v).await;
    }

    /// Inserts row `id` with `v`.
    async fn insert(&self, id: i32, v: &str) {
        self.db
            .execute("INSERT INTO items VALUES ($1, $2)", &[&id, &v])
            .await
            .unwrap();
    }

    /// The server's log so far.
    fn server_log(&self) -> String {
        std::fs::read_to_string(self.storage.path().join("server.log")).unwrap_or_default()
    }

    /// Follows every shape until it has a row with `v`; fails on any answer but 200 (a 409
    /// would mean the shape was dropped).
    async fn every_shape_gets(&mut self, v: &str) {
        for (query, handle, offset) in &mut self.shapes {
            let started = Instant::now();
            loop {
                let url = self
                    .server
                    .url(&format!("{query}&offset={offset}&handle={handle}"));
                let reply = self.http.get(url).send().await.unwrap();
                if reply.status() == 503 {
                    // Connections just closed may still count against the limit; a client
                    // tries again.
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "{query}: 503 for 30 s"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                if reply.status() != 200 {
                    let status = reply.status();
                    let body = reply.text().await.unwrap_or_default();
                    let log = std::fs::read_to_string(self.storage.path().join("server.log"))
                        .unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(5).collect();
                    panic!("{query}: {status} {body}; server log: {}", tail.join("\n"));
                }
                *offset = reply.headers()["electric-offset"]
                    .to_str()
                    .unwrap()
                    .to_owned();
                let body: Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
                if body
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m["value"]["v"] == v))
                {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{query} never got {v}"
                );
            }
        }
    }
}

/// By default shape logs and connections share the open-files limit: with one connection the
/// server keeps more logs open than the sixteenth of the limit it once kept, and when
/// connections come it parks logs to leave them their descriptors; the next change still
/// reaches every shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_logs_leave_their_descriptors_to_connections() {
    const LIMIT: usize = 1024;
    const SHAPES: usize = 100;
    const CONNECTIONS: usize = 400;
    // The limit less a quarter of it (at least 256), less the connections, at six descriptors
    // per log.
    let bound_with = |connections: usize| (LIMIT - 256 - connections) / 6;
    assert!(SHAPES > LIMIT / 16 && SHAPES < bound_with(2));
    let mut l = Limited::start(LIMIT, None, SHAPES).await;
    l.change_reaches_every_shape(1, "first").await;
    assert_eq!(
        l.logs_open().await,
        SHAPES,
        "every log the change opened stays open while descriptors allow"
    );

    let mut idle = Vec::new();
    for _ in 0..CONNECTIONS {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", l.port))
                .await
                .unwrap(),
        );
    }
    let started = Instant::now();
    let mut open = l.logs_open().await;
    while open > bound_with(CONNECTIONS) && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        open = l.logs_open().await;
    }
    assert!(
        open <= bound_with(CONNECTIONS),
        "{open} logs open with {CONNECTIONS} connections; at most {} leave them descriptors",
        bound_with(CONNECTIONS)
    );
    l.change_reaches_every_shape(2, "second").await;
    drop(idle);
}

/// When accepting a connection finds no descriptor free, the server parks its idle logs rather
/// than turn the connection away: with the open bound set far past what the limit allows, a
/// burst of connections is served in full and the logs end up parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_short_of_descriptors_make_idle_logs_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const LIMIT: usize = 256;
    const SHAPES: usize = 28;
    const CONNECTIONS: usize = 120;
    let mut l = Limited::start(LIMIT, Some(1000), SHAPES).await;
    l.change_reaches_every_shape(1, "first").await;
    assert_eq!(l.logs_open().await, SHAPES);

    let mut streams = l.connect(CONNECTIONS).await;
    for (i, stream) in streams.iter_mut().enumerate() {
        stream
            .write_all(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head))
            .await
            .unwrap_or_else(|_| panic!("connection {i} got no answer"));
        assert!(read.is_ok(), "connection {i} was closed: {read:?}");
        assert_eq!(&head, b"HTTP/1.1 200", "connection {i}");
    }
    assert!(
        l.logs_open().await < SHAPES,
        "idle logs were parked for the connections"
    );
    drop(streams);
    l.change_reaches_every_shape(2, "second").await;
}

/// A process out of file descriptors pauses replication rather than dropping shapes: once every
/// idle log has given its descriptors to connections, a change reaching every shape cannot
/// open their logs; when the connections go, replication resumes from the slot and the change
/// reaches every shape, none of which was dropped (no 409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_pauses_replication_and_drops_no_shape() {
    const LIMIT: usize = 256;
    const SHAPES: usize = 28;
    const CONNECTIONS: usize = 320;
    let mut l = Limited::start(LIMIT, Some(1000), SHAPES).await;
    l.change_reaches_every_shape(1, "first").await;

    // More connections than descriptors: the server parks every idle log for them and then
    // has none left.
    let streams = l.connect(CONNECTIONS).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    l.insert(2, "short").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(streams);
    l.every_shape_gets("short").await;
    assert!(
        l.server_log()
            .contains("out of file descriptors for shape logs"),
        "the change was to find no descriptor; server log: {}",
        l.server_log()
    );
    l.change_reaches_every_shape(3, "after").await;
    assert!(
        !l.server_log().contains("invalidated"),
        "no shape was dropped: {}",
        l.server_log()
    );
}
