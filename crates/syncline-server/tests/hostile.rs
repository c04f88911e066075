//! Hostile and unusual input: what outside testing tried, answered with clear 4xx errors and
//! never with a bypass, a 5xx or a leak.

mod common;

use common::{config, fixture_with};

const ITEMS: &str =
    "CREATE TABLE items (id int PRIMARY KEY, title text); INSERT INTO items VALUES (1, 'one');";

async fn status(f: &common::Fixture, path_and_query: &str) -> u16 {
    let url = format!("http://{}{path_and_query}", f.server.addr);
    f.http.get(url).send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_the_shape_path_needs_the_secret() {
    let f = fixture_with(ITEMS, |c| {
        c.secret = Some("s3cret".into());
        c.insecure = false;
    })
    .await;
    for path in [
        "/v1/shape",
        "/v1/shape/",
        "//v1/shape",
        "/v1//shape",
        "/v1/shape//",
    ] {
        assert_eq!(
            status(&f, &format!("{path}?table=items&offset=-1")).await,
            401,
            "{path}"
        );
        assert_eq!(
            status(&f, &format!("{path}?table=items&offset=-1&secret=s3cret")).await,
            200,
            "{path}"
        );
    }
    for path in ["/v1%2Fshape", "/v1/%73hape", "/%761/shape"] {
        assert_eq!(
            status(&f, &format!("{path}?table=items&offset=-1&secret=s3cret")).await,
            404,
            "{path}: percent-encoded paths match no route"
        );
    }
    assert_eq!(
        status(&f, "/v1/shape?table=items&offset=-1&secret=s3cre").await,
        401
    );
    assert_eq!(status(&f, "/metrics").await, 401, "metrics need the secret");
    assert_eq!(status(&f, "/metrics?secret=s3cret").await, 200);
    assert_eq!(
        status(&f, "/v1/health").await,
        200,
        "health needs no secret"
    );
}

#[test]
fn secrets_that_protect_nothing_are_refused() {
    let mut c = config("postgres://x@localhost/db", std::path::Path::new("/tmp"));
    c.insecure = false;
    c.secret = Some(String::new());
    assert!(c.validate().unwrap_err().contains("is empty"));
    c.secret = Some("s3cret".into());
    c.insecure = true;
    assert!(c.validate().unwrap_err().contains("cannot both be set"));
    c.insecure = false;
    assert_eq!(c.validate(), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_whose_policies_apply_are_refused() {
    let cluster = tokio::task::spawn_blocking(syncline_testkit::PgCluster::start)
        .await
        .unwrap();
    let admin = cluster.connect("postgres").await;
    admin
        .batch_execute(
            "CREATE ROLE app LOGIN REPLICATION; GRANT CREATE ON DATABASE postgres TO app;
             GRANT CREATE ON SCHEMA public TO app;",
        )
        .await
        .unwrap();
    let url = format!("postgres://app@127.0.0.1:{}/postgres", cluster.port());
    let (app, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    app.batch_execute(
        "CREATE TABLE notes (id int PRIMARY KEY, owner text);
         INSERT INTO notes VALUES (1, 'alice'), (2, 'bob');
         ALTER TABLE notes ENABLE ROW LEVEL SECURITY; ALTER TABLE notes FORCE ROW LEVEL SECURITY;
         CREATE POLICY mine ON notes USING (owner = 'alice');
         CREATE TABLE open_notes (id int PRIMARY KEY); INSERT INTO open_notes VALUES (1);",
    )
    .await
    .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let server = syncline_server::startup::start(config(&url, storage.path()))
        .await
        .unwrap();
    let http = common::http_client();
    let get = |q: &'static str| {
        let http = http.clone();
        let addr = server.addr;
        async move {
            let r = http
                .get(format!("http://{addr}/v1/shape?{q}"))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap())
        }
    };
    let (status, body) = get("table=open_notes&offset=-1").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get("table=notes&offset=-1").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("row-level security"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_bodies_up_to_electrics_limit_are_read() {
    let f = common::fixture(ITEMS).await;
    let url = format!(
        "http://{}/v1/shape?table=items&offset=-1&log=changes_only",
        f.server.addr
    );
    let post = |padding: usize| {
        let body = format!(
            r#"{{"padding":"{}","where":"id > 0","order_by":"id"}}"#,
            "x".repeat(padding)
        );
        f.http.post(&url).body(body).send()
    };
    assert_eq!(post(5_000_000).await.unwrap().status(), 200);
    assert_eq!(post(8_100_000).await.unwrap().status(), 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_postgres_rejects_because_of_the_request_is_a_400_with_its_message() {
    let f = common::fixture(
        "CREATE TYPE mood AS ENUM ('happy', 'sad');
         CREATE TABLE t (id int PRIMARY KEY, m mood, name text);
         INSERT INTO t VALUES (1, 'happy', 'abc');",
    )
    .await;
    let enum_literal = f.get("table=t&offset=-1&where=m%20%3D%20'angry'").await;
    assert_eq!(enum_literal.status, 400, "{}", enum_literal.body);
    assert_eq!(
        enum_literal.body["errors"]["where"][0],
        "invalid input value for enum mood: \"angry\""
    );
    let on_data = f.get("table=t&offset=-1&where=name::int%20%3E%200").await;
    assert_eq!(on_data.status, 400, "{}", on_data.body);
    assert_eq!(
        on_data.body["errors"]["where"][0],
        "invalid input syntax for type integer: \"abc\""
    );
    let nul = f.get("table=%22t%00x%22&offset=-1").await;
    assert_eq!(nul.status, 400, "{}", nul.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_cannot_be_published_is_a_400_that_says_why_and_is_remembered() {
    let cluster = tokio::task::spawn_blocking(syncline_testkit::PgCluster::start)
        .await
        .unwrap();
    let admin = cluster.connect("postgres").await;
    admin
        .batch_execute(
            "CREATE ROLE app LOGIN REPLICATION; GRANT CREATE ON DATABASE postgres TO app;
             GRANT CREATE ON SCHEMA public TO app;
             CREATE TABLE theirs (id int PRIMARY KEY); GRANT SELECT ON theirs TO app;",
        )
        .await
        .unwrap();
    let url = format!("postgres://app@127.0.0.1:{}/postgres", cluster.port());
    let (app, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    app.batch_execute("CREATE TABLE mine (id int PRIMARY KEY); INSERT INTO mine VALUES (1);")
        .await
        .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let server = syncline_server::startup::start(config(&url, storage.path()))
        .await
        .unwrap();
    let http = common::http_client();
    let get = |table: &'static str| {
        let http = http.clone();
        let addr = server.addr;
        async move {
            let started = std::time::Instant::now();
            let r = http
                .get(format!("http://{addr}/v1/shape?table={table}&offset=-1"))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap(), started.elapsed())
        }
    };
    assert_eq!(get("mine").await.0, 200);
    let (status, body, _) = get("theirs").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("must be owner of table theirs"), "{body}");
    // Eight clients asking again get the remembered answer, and shapes are still created.
    let failing: Vec<_> = (0..8).map(|_| tokio::spawn(get("theirs"))).collect();
    admin
        .batch_execute("CREATE TABLE more (id int); ALTER TABLE more OWNER TO app;")
        .await
        .unwrap();
    assert_eq!(get("more").await.0, 200);
    for client in failing {
        let (status, body, took) = client.await.unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subset_clause_never_sees_rows_outside_its_shape() {
    // Bob's row lies first on disk, and the shape's condition costs more than the client's
    // clause: evaluated together, the clause would run on bob's row and fail on it, with his
    // note in the message (or, by failing at all, tell that such a row exists).
    let f = common::fixture(
        "CREATE TABLE notes (id int PRIMARY KEY, owner_id text NOT NULL, body text NOT NULL);
         INSERT INTO notes VALUES (101, 'bob', 'BOB-PRIVATE 101'), (1, 'alice', 'true'), (2, 'alice', 'false');",
    )
    .await;
    let base =
        "table=notes&log=changes_only&where=lower(owner_id)%20%3D%20%241&params%5B1%5D=alice";
    f.sync(base).await;
    for clause in [
        "body%3A%3Abool",
        "1%20%2F%20(id%20-%20101)%20%3D%201",
        "body%20%3C%3E%20%27%27",
    ] {
        let subset = f
            .get(&format!("{base}&offset=-1&subset__where={clause}"))
            .await;
        assert_eq!(subset.status, 200, "{clause}: {}", subset.body);
        let text = subset.body.to_string();
        assert!(!text.contains("BOB"), "{clause}: {text}");
        assert!(subset
            .changes()
            .iter()
            .all(|m| m["value"]["owner_id"] == "alice"));
    }
}

/// The binary parses where clauses on its runtime's own threads, whose stacks are sized for
/// the deepest parse (no stack is mapped for each clause): clauses nested up to and past the
/// parser's limit are answered, 200 or 400 with the parser's message, and the server lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_answers_clauses_nested_to_the_parsers_limit() {
    let cluster = tokio::task::spawn_blocking(syncline_testkit::PgCluster::start)
        .await
        .unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute("CREATE TABLE items (id int PRIMARY KEY, i4 int4)")
        .await
        .unwrap();
    let storage = tempfile::tempdir().unwrap();
    let mut server = common::process::Syncline::start(
        &cluster.connection_string("postgres"),
        &storage.path().join("data"),
        common::process::free_port(),
        &storage.path().join("server.log"),
    );
    let http = common::http_client();
    server.wait_active(&http).await;
    let deep =
        |open: &str, close: &str, n: usize| format!("{}i4 = 1{}", open.repeat(n), close.repeat(n));
    let sum = |terms: usize| format!("{}i4 = 1", "i4 + ".repeat(terms));
    for (text, want) in [
        (deep("(", ")", 300), Some(200)),
        (sum(20), Some(200)),
        (deep("NOT ", "", 300), Some(400)),
        (sum(40), Some(400)),
        (deep("NOT ", "", 2_000), None),
        (deep("lower(", ")", 500), None),
        (deep("- ", "", 2_000).replace("i4 = 1", "i4") + " = 1", None),
    ] {
        let reply = http
            .get(format!("http://127.0.0.1:{}/v1/shape", server.port))
            .query(&[("table", "items"), ("offset", "-1"), ("where", &text)])
            .send()
            .await
            .unwrap_or_else(|e| panic!("no answer to a clause {} bytes long: {e}", text.len()));
        let status = reply.status().as_u16();
        match want {
            Some(want) => assert_eq!(status, want, "{}…", &text[..40]),
            None => assert!(
                status == 200 || status == 400,
                "{status} for {}…",
                &text[..40]
            ),
        }
        if status == 400 {
            let body = reply.text().await.unwrap();
            assert!(body.contains("where"), "{body}");
        }
    }
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server is still running"
    );
}
