//! Several `syncline` processes on one storage directory and stream id: the writer, standbys
//! (`--role=auto`) and replicas (`--role=replica`). Standbys and replicas serve the writer's
//! shapes byte for byte and live, never write a byte, and a standby takes over when the writer
//! stops (SIGTERM), dies (SIGKILL) or loses its lock without a client losing its handle or a
//! change.

mod common;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::process::{free_port, table_titles, Follower, Syncline};
use serde_json::Value;
use syncline_testkit::PgCluster;

/// A cluster with `items(id, title)` holding 100 rows, and a directory for server logs (kept
/// for a failing test's message; each test removes it once it passed).
async fn cluster() -> (PgCluster, tokio_postgres::Client, PathBuf) {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, title text NOT NULL);
         INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 100) g;",
    )
    .await
    .unwrap();
    let logs = tempfile::Builder::new()
        .prefix("syncline-replicas-")
        .tempdir()
        .unwrap()
        .keep();
    (cluster, db, logs)
}

/// Starts `syncline serve --role <role>` on the shared storage.
fn serve(cluster: &PgCluster, storage: &Path, role: &str, log: &Path) -> Syncline {
    serve_with(cluster, storage, role, log, &[])
}

/// [`serve`] with more environment variables.
fn serve_with(
    cluster: &PgCluster,
    storage: &Path,
    role: &str,
    log: &Path,
    env: &[(&str, &str)],
) -> Syncline {
    let mut command = Command::new(env!("CARGO_BIN_EXE_syncline"));
    command
        .arg("serve")
        .env("SYNCLINE_ROLE", role)
        .env("ELECTRIC_ENABLE_INTEGRATION_TESTING", "true")
        .envs(env.iter().copied());
    Syncline::spawn(
        command,
        &cluster.connection_string("postgres"),
        storage,
        free_port(),
        log,
    )
}

/// `/v1/health`: the status code and the body.
async fn health(server: &Syncline, http: &reqwest::Client) -> Option<(u16, Value)> {
    let url = format!("http://127.0.0.1:{}/v1/health", server.port);
    let r = http.get(url).send().await.ok()?;
    let status = r.status().as_u16();
    Some((status, serde_json::from_str(&r.text().await.ok()?).ok()?))
}

/// Starts the writer on `storage` and a client of `table=items` caught up with it.
async fn writer_with_items_shape(
    cluster: &PgCluster,
    storage: &Path,
    logs: &Path,
    http: &reqwest::Client,
) -> (Syncline, Follower) {
    let writer = serve(cluster, storage, "auto", &logs.join("writer.log"));
    wait_role(&writer, http, "writer").await;
    let mut f = Follower::start("table=items", &writer, http).await;
    f.catch_up(&writer, http).await.unwrap();
    (writer, f)
}

/// Starts a standby and a replica beside the writer on `storage`, and waits until both serve.
async fn standby_and_replica(
    cluster: &PgCluster,
    storage: &Path,
    logs: &Path,
    http: &reqwest::Client,
) -> (Syncline, Syncline) {
    let standby = serve(cluster, storage, "auto", &logs.join("standby.log"));
    let replica = serve(cluster, storage, "replica", &logs.join("replica.log"));
    wait_role(&standby, http, "standby").await;
    wait_role(&replica, http, "replica").await;
    (standby, replica)
}

/// Waits until the server serves in `role`; returns how long that took.
async fn wait_role(server: &Syncline, http: &reqwest::Client, role: &str) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if let Some((200, body)) = health(server, http).await {
            if body["status"] == "active" && body["role"] == role {
                return started.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "server on port {} is not an active {role}: {:?}",
        server.port,
        health(server, http).await
    );
}

/// Waits until one of `servers` is the active writer and every other an active standby;
/// returns the writer.
async fn next_writer<'a>(servers: &[&'a Syncline], http: &reqwest::Client) -> &'a Syncline {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let mut roles = Vec::new();
        for server in servers {
            roles.push(match health(server, http).await {
                Some((200, body)) if body["status"] == "active" => body["role"].clone(),
                _ => Value::Null,
            });
        }
        let writers: Vec<usize> = (0..roles.len()).filter(|&i| roles[i] == "writer").collect();
        if writers.len() == 1 && roles.iter().filter(|r| *r == "standby").count() == roles.len() - 1
        {
            return servers[writers[0]];
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no single active writer among the servers");
}

/// A GET of the shape API: status, the `electric-*` headers, and the body's bytes.
async fn get(
    server: &Syncline,
    http: &reqwest::Client,
    query: &str,
) -> (u16, BTreeMap<String, String>, String) {
    let r = http.get(server.url(query)).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("electric-") && k.as_str() != "electric-cursor")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    (status, headers, r.text().await.unwrap())
}

/// Sends SIGTERM and waits for the process to exit; returns how long that took.
fn terminate(server: &mut Syncline) -> (Duration, std::process::ExitStatus) {
    let started = Instant::now();
    let pid = libc::pid_t::try_from(server.child.id()).unwrap();
    // SAFETY: kill only sends a signal to our child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = server.child.wait().unwrap();
    (started.elapsed(), status)
}

/// Every file under `dir` with a hash of its bytes.
fn file_hashes(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let mut h = DefaultHasher::new();
                h.write(&bytes);
                out.insert(path, (bytes.len() as u64, h.finish()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standbys_and_replicas_serve_the_writers_shapes_byte_for_byte_and_live() {
    let (cluster, db, logs) = cluster().await;
    let storage = tempfile::tempdir().unwrap();
    let http = common::http_client();
    let (writer, mut f) = writer_with_items_shape(&cluster, storage.path(), &logs, &http).await;
    db.batch_execute("UPDATE items SET title = 'changed' WHERE id <= 5")
        .await
        .unwrap();
    // Up to date with the update, not only with what the writer had processed when asked: the
    // live requests below start from this offset and wait for the next write.
    f.converge(&writer, &http, &table_titles(&db, "true").await, &logs)
        .await;

    let (standby, replica) = standby_and_replica(&cluster, storage.path(), &logs, &http).await;

    // Every response the writer gives, the others give byte for byte.
    let initial = get(&writer, &http, "table=items&offset=-1").await;
    assert_eq!(initial.0, 200);
    let catch_up = format!("table=items&offset={}&handle={}", "0_inf", f.handle);
    let from_changes = get(&writer, &http, &catch_up).await;
    assert_eq!(from_changes.0, 200);
    for server in [&standby, &replica] {
        assert_eq!(get(server, &http, "table=items&offset=-1").await, initial);
        assert_eq!(get(server, &http, &catch_up).await, from_changes);
    }

    // Live requests on the standby and the replica are answered when the writer writes.
    for server in [&standby, &replica] {
        let live = format!(
            "table=items&offset={}&handle={}&live=true",
            f.offset, f.handle
        );
        let request = tokio::spawn({
            let (http, url) = (http.clone(), server.url(&live));
            async move {
                let r = http.get(url).send().await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap(), Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let id = 1000 + server.port;
        let committed = Instant::now();
        db.batch_execute(&format!("INSERT INTO items VALUES ({id}, 'live')"))
            .await
            .unwrap();
        let (status, body, answered) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(&format!("\"{id}\"")), "{body}");
        let lag = answered.duration_since(committed);
        println!("commit to live answer on port {}: {lag:?}", server.port);
        assert!(
            lag < Duration::from_secs(1),
            "{lag:?}: long-poll timeout is 1 s"
        );
        f.catch_up(&writer, &http).await.unwrap();
    }

    // What needs the writer: a replica refuses at once, a standby while the writer lives after a
    // hand-over's worth of waiting (behind a load balancer, the request is tried on the writer).
    let new_shape = "table=items&where=id%20%3E%2050&offset=-1";
    let started = Instant::now();
    let (status, headers, body) = get(&replica, &http, new_shape).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("read replica"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!headers.contains_key("electric-handle"));
    let started = Instant::now();
    let (status, _, body) = get(&standby, &http, new_shape).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("another server holds the writer's lock"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    // A shape the writer makes is served by the others once its snapshot is complete.
    let (status, made, body) = get(&writer, &http, new_shape).await;
    assert_eq!(status, 200, "{body}");
    let mut served = None;
    for _ in 0..100 {
        let answer = get(&replica, &http, new_shape).await;
        if answer.0 == 200 {
            served = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let served = served.expect("the replica serves the writer's new shape");
    assert_eq!(served.1["electric-handle"], made["electric-handle"]);

    // A shape the writer deletes is gone for the others' clients too.
    let delete = writer.url(&format!("table=items&handle={}", f.handle));
    assert_eq!(http.delete(delete).send().await.unwrap().status(), 202);
    let old = format!("table=items&offset={}&handle={}", f.offset, f.handle);
    let mut status = 0;
    for _ in 0..100 {
        status = get(&replica, &http, &old).await.0;
        if status == 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 409, "the replica learns of the deletion");
    std::fs::remove_dir_all(&logs).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_after_sigterm_and_after_sigkill_without_loss() {
    let (cluster, db, logs) = cluster().await;
    let storage = tempfile::tempdir().unwrap();
    let http = common::http_client();
    let mut first = serve(&cluster, storage.path(), "auto", &logs.join("first.log"));
    wait_role(&first, &http, "writer").await;
    let standby = serve(&cluster, storage.path(), "auto", &logs.join("second.log"));
    wait_role(&standby, &http, "standby").await;
    let queries = [
        ("table=items", "true"),
        ("table=items&where=id%20%25%202%20%3D%200", "id % 2 = 0"),
    ];
    let mut followers = Vec::new();
    for (query, filter) in queries {
        let mut f = Follower::start(query, &first, &http).await;
        f.catch_up(&first, &http).await.unwrap();
        followers.push((f, filter));
    }
    let handles: Vec<String> = followers.iter().map(|(f, _)| f.handle.clone()).collect();
    let writes = tokio::spawn({
        let db = cluster.connect("postgres").await;
        async move {
            for i in 0..400 {
                db.batch_execute(&format!(
                    "INSERT INTO items VALUES ({0}, 'new {0}'); UPDATE items SET title = 'changed {i}' WHERE id = {1};",
                    1000 + i,
                    1 + i % 100
                ))
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    // SIGTERM: the writer hands over, the standby writes at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (f, _) in &mut followers {
        f.catch_up(&standby, &http).await.unwrap();
    }
    let (stopped_in, exit) = terminate(&mut first);
    assert!(exit.success(), "{exit:?}");
    let took_over = wait_role(&standby, &http, "writer").await;
    println!("SIGTERM: writer exited in {stopped_in:?}, standby writing {took_over:?} later");
    assert!(took_over < Duration::from_secs(3), "{took_over:?}");
    let third = serve(&cluster, storage.path(), "auto", &logs.join("third.log"));
    wait_role(&third, &http, "standby").await;

    // SIGKILL: the lock goes with the writer's session; the next standby takes over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (f, _) in &mut followers {
        f.catch_up(&third, &http).await.unwrap();
    }
    let killed = Instant::now();
    standby.kill();
    wait_role(&third, &http, "writer").await;
    println!("SIGKILL: standby writing {:?} later", killed.elapsed());

    writes.await.unwrap();
    for ((f, filter), handle) in followers.iter_mut().zip(&handles) {
        f.catch_up(&third, &http)
            .await
            .expect("the handle lives through both takeovers");
        assert_eq!(&f.handle, handle);
        f.converge(&third, &http, &table_titles(&db, filter).await, &logs)
            .await;
        let mut fresh = Follower::start(&f.query, &third, &http).await;
        fresh.catch_up(&third, &http).await.unwrap();
        fresh
            .converge(&third, &http, &table_titles(&db, filter).await, &logs)
            .await;
        assert_eq!(&fresh.handle, handle, "no shape was made again");
    }
    std::fs::remove_dir_all(&logs).unwrap();
}

/// A writer whose lock's session ends (terminated in Postgres, as a restart or a network
/// failure would) steps down to a standby without writing, and the server that takes the lock
/// next (the standby, or the old writer again) goes on from every commit the writer
/// acknowledged, in logs that parked between writes as in the others. (That the next writer
/// waits for a group journal the old one still holds is `park.rs`'s test: here the old writer
/// lets go before the next one opens the store.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_loses_its_lock_steps_down_and_a_standby_goes_on_without_loss() {
    let (cluster, db, logs) = cluster().await;
    let storage = tempfile::tempdir().unwrap();
    let http = common::http_client();
    // Logs park 100 ms after their last write.
    let serve_parking = |log: &str| {
        serve_with(
            &cluster,
            storage.path(),
            "auto",
            &logs.join(log),
            &[("SYNCLINE_IDLE_LOG_PARK", "100ms")],
        )
    };
    let first = serve_parking("first.log");
    wait_role(&first, &http, "writer").await;
    let standby = serve_parking("second.log");
    wait_role(&standby, &http, "standby").await;
    let mut followers = Vec::new();
    for k in 1..=10 {
        let mut f =
            Follower::start(&format!("table=items&where=id%20%3D%20{k}"), &first, &http).await;
        f.catch_up(&first, &http).await.unwrap();
        followers.push((f, format!("id = {k}")));
    }
    // Two rows a transaction (a group flush), each shape written every fifth transaction and
    // idle in between, long enough to park.
    let write = |from: u32, to: u32| {
        let cluster = &cluster;
        async move {
            let db = cluster.connect("postgres").await;
            for i in from..to {
                db.batch_execute(&format!(
                    "UPDATE items SET title = 'changed {i}' WHERE id IN ({}, {});",
                    1 + 2 * (i % 5),
                    2 + 2 * (i % 5)
                ))
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        }
    };
    write(0, 20).await;
    let writer_lock: Vec<i32> = db
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(writer_lock.len(), 1, "the writer holds the lock");
    db.execute("SELECT pg_terminate_backend($1)", &[&writer_lock[0]])
        .await
        .unwrap();
    // Either server may take the lock next: the standby, or the old writer once it stepped
    // down (a standby then too).
    let writer = next_writer(&[&first, &standby], &http).await;
    write(20, 40).await;
    for (f, filter) in &mut followers {
        f.catch_up(writer, &http)
            .await
            .expect("the handle lives through the takeover");
        f.converge(writer, &http, &table_titles(&db, filter).await, &logs)
            .await;
    }
    std::fs::remove_dir_all(&logs).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_and_a_replica_never_write_a_byte() {
    let (cluster, db, logs) = cluster().await;
    let storage = tempfile::tempdir().unwrap();
    let http = common::http_client();
    let writer = serve(&cluster, storage.path(), "auto", &logs.join("writer.log"));
    wait_role(&writer, &http, "writer").await;
    let mut shapes = Vec::new();
    for query in [
        "table=items",
        "table=items&where=id%20%3C%2030&columns=id,title",
    ] {
        let mut f = Follower::start(query, &writer, &http).await;
        f.catch_up(&writer, &http).await.unwrap();
        shapes.push(f);
    }
    let (standby, replica) = standby_and_replica(&cluster, storage.path(), &logs, &http).await;

    let loading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let load = tokio::spawn({
        let db = cluster.connect("postgres").await;
        let loading = loading.clone();
        async move {
            let mut i = 0;
            while loading.load(std::sync::atomic::Ordering::Relaxed) {
                db.batch_execute(&format!(
                    "UPDATE items SET title = 'load {i}' WHERE id = {}",
                    1 + i % 100
                ))
                .await
                .unwrap();
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            i
        }
    });
    let pid = libc::pid_t::try_from(writer.child.id()).unwrap();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Frozen, the writer cannot change a file; the lock stays with its session.
        // SAFETY: kill only sends a signal to our child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = file_hashes(storage.path());
        for server in [&standby, &replica] {
            for f in &shapes {
                assert_eq!(
                    get(server, &http, &format!("{}&offset=-1", f.query))
                        .await
                        .0,
                    200
                );
                let live = format!(
                    "{}&offset={}&handle={}&live=true",
                    f.query, f.offset, f.handle
                );
                assert_eq!(get(server, &http, &live).await.0, 200);
            }
            let new_shape = get(server, &http, "table=items&where=id%20%3D%207&offset=-1").await;
            assert_eq!(new_shape.0, 503);
        }
        let after = file_hashes(storage.path());
        let changed: Vec<&PathBuf> = after
            .iter()
            .filter(|(path, hash)| before.get(*path) != Some(hash))
            .map(|(path, _)| path)
            .chain(before.keys().filter(|p| !after.contains_key(*p)))
            .collect();
        assert!(
            changed.is_empty(),
            "files changed while only the standby and the replica ran: {changed:?}"
        );
        let (_, standby_health) = health(&standby, &http).await.unwrap();
        assert_eq!(standby_health["role"], "standby");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    }
    loading.store(false, std::sync::atomic::Ordering::Relaxed);
    let transactions = load.await.unwrap();
    println!("{transactions} transactions of load");
    let f = &mut shapes[0];
    f.catch_up(&replica, &http).await.unwrap();
    f.converge(&replica, &http, &table_titles(&db, "true").await, &logs)
        .await;
    std::fs::remove_dir_all(&logs).unwrap();
}

/// The shape logs in `storage`: the names of their directories.
fn log_handles(storage: &Path) -> Vec<String> {
    std::fs::read_dir(storage.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_whose_snapshot_the_writer_is_taking_is_not_gone_on_a_standby_or_replica() {
    let (cluster, _db, logs) = cluster().await;
    let storage = tempfile::tempdir().unwrap();
    let http = common::http_client();
    // The table is published once its first shape exists: the blocked snapshot below is the
    // only thing the lock holds up.
    let (writer, _items) = writer_with_items_shape(&cluster, storage.path(), &logs, &http).await;
    let (standby, replica) = standby_and_replica(&cluster, storage.path(), &logs, &http).await;
    let before = log_handles(storage.path());

    // The snapshot's query waits for the table's lock: the writer has made the shape's log,
    // not its metadata.
    let locker = cluster.connect("postgres").await;
    locker
        .batch_execute("BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let query = "table=items&where=id%20%3E%2050";
    let initial = tokio::spawn({
        let (http, url) = (http.clone(), writer.url(&format!("{query}&offset=-1")));
        async move {
            let r = http.get(url).send().await.unwrap();
            let handle = r.headers()["electric-handle"].to_str().unwrap().to_owned();
            (r.status().as_u16(), handle, r.text().await.unwrap())
        }
    });
    let started = Instant::now();
    let handle = loop {
        let new: Vec<String> = log_handles(storage.path())
            .into_iter()
            .filter(|h| !before.contains(h))
            .collect();
        if let [handle] = new.as_slice() {
            break handle.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the writer made no log for the new shape"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!initial.is_finished(), "the snapshot waits for the lock");

    // Still being made: the client is told to retry, not that its handle is gone (a 409 would
    // send it back to the writer for a new shape, over and over while the snapshot runs). A
    // handle no server ever made is gone.
    for server in [&standby, &replica] {
        let taking = format!("{query}&offset=0_0&handle={handle}");
        let (status, headers, body) = get(server, &http, &taking).await;
        assert_eq!(status, 503, "port {}: {body}", server.port);
        assert!(!headers.contains_key("electric-handle"), "{headers:?}");
        let unknown = format!("{query}&offset=0_0&handle=1-2");
        assert_eq!(get(server, &http, &unknown).await.0, 409);
    }

    locker.batch_execute("COMMIT").await.unwrap();
    let (status, made, body) = initial.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(made, handle);
    for server in [&standby, &replica] {
        let snapshot = format!("{query}&offset=-1");
        let mut served = None;
        for _ in 0..100 {
            let answer = get(server, &http, &snapshot).await;
            if answer.0 == 200 {
                served = Some(answer);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, headers, body) = served.expect("the shape is served once its snapshot is complete");
        assert_eq!(headers["electric-handle"], handle);
        assert_eq!(body.matches("\"insert\"").count(), 50, "{body}");
    }
    std::fs::remove_dir_all(&logs).unwrap();
}
